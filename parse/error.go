// Package parse holds the one error by which every reader of kvaudit's
// inputs says that an input is not in its format: a safetensors file, a
// dump, its manifest, a record, a payload, a NIXL log, a synthetic
// configuration. Each names the file, the line, the field and what is
// wrong, so that a program (and the CLI's exit code 3 and its -o json
// error) finds them with one errors.As:
//
//	var pe *parse.Error
//	if errors.As(err, &pe) {
//		fmt.Println(pe.Format, pe.File, pe.Field)
//	}
package parse

import (
	"errors"
	"fmt"
	"strconv"
)

// The formats an Error names (Error.Format).
const (
	Safetensors = "safetensors"  // a safetensors file (layout)
	Dump        = "dump"         // one rank's dump (layout)
	Manifest    = "manifest"     // a dump's manifest (layout)
	Record      = "record"       // a kvaudit-record/1 file (wire)
	Payload     = "payload"      // what a producer sends (wire)
	NIXLLog     = "nixl log"     // a kvaudit-nixl-log/1 file (transfer)
	SynthConfig = "synth.Config" // a synthetic side's configuration (layout/synth)
)

// Error is an input that is not in its format, or a value a writer of
// the format refuses. On error a reader returns nil results and an
// *Error, possibly wrapped by its caller's context.
type Error struct {
	// Format is what was read: one of the constants above.
	Format string
	// File is the file read, "" when the input is not a file (a
	// payload given as text, a configuration).
	File string
	// Line is the 1-based line of a line-oriented format (a NIXL log),
	// 0 when none.
	Line int
	// Field names the offending element as the format names it (a JSON
	// path such as `groups[0].layers[2].layout`, "header", "base64",
	// a Go field name), "" when the error concerns the input as a whole.
	Field string
	// Msg says what is wrong; when empty, Err does.
	Msg string
	// Err is the cause, when there is one (Unwrap returns it).
	Err error
}

// Error returns `FORMAT "FILE": line LINE: FIELD: MSG`, each part present
// only when set: `manifest "d/manifest.json": groups[0]: ...`,
// `payload: num_tokens: ...`.
func (e *Error) Error() string {
	b := make([]byte, 0, 64+len(e.File)+len(e.Field)+len(e.Msg))
	b = append(b, e.Format...)
	if e.File != "" {
		b = append(b, ' ')
		b = strconv.AppendQuote(b, e.File)
	}
	if e.Line > 0 {
		b = append(b, ": line "...)
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	if e.Field != "" {
		b = append(b, ": "...)
		b = append(b, e.Field...)
	}
	b = append(b, ": "...)
	switch {
	case e.Msg != "":
		b = append(b, e.Msg...)
	case e.Err != nil:
		b = append(b, e.Err.Error()...)
	}
	return string(b)
}

// Unwrap returns the cause, or nil.
func (e *Error) Unwrap() error { return e.Err }

// errorf returns an *Error of format in file at field, its message
// formatted.
func errorf(format, file, field, msg string, args ...any) *Error {
	return &Error{Format: format, File: file, Field: field, Msg: fmt.Sprintf(msg, args...)}
}

// As returns the first *Error of the format in err's chain (any format
// when format is ""), looking through the causes of Errors of other
// formats too (a dump's error whose cause is its manifest's), or nil.
func As(err error, format string) *Error {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return nil
		}
		if format == "" || e.Format == format {
			return e
		}
		err = e.Err
	}
	return nil
}
