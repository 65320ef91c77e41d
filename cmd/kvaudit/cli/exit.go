package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/parse"
	"github.com/kvaudit/kvaudit/side"
)

// Exit codes (docs/spec.md §11). The help text is written from this table.
const (
	// ExitOK: verified, or the command succeeded.
	ExitOK = 0
	// ExitMismatch: some block differs, or a campaign missed a fault.
	ExitMismatch = 1
	// ExitUnverified: a load could not be verified (unless
	// --allow-unverified).
	ExitUnverified = 2
	// ExitInvalid: invalid input or usage.
	ExitInvalid = 3
	// ExitInternal: a bug in kvaudit (a recovered panic, an internal
	// error), never a verdict.
	ExitInternal = 4
	// ExitInterrupted: stopped by SIGINT (Ctrl-C), outputs removed.
	ExitInterrupted = 130
	// ExitTerminated: stopped by SIGTERM, outputs removed.
	ExitTerminated = 143
)

var exitCodes = []struct {
	code    int
	meaning string
}{
	{ExitOK, "verified, or success"},
	{ExitMismatch, "mismatch, or a fault a campaign missed"},
	{ExitUnverified, "unverified (unless --allow-unverified)"},
	{ExitInvalid, "invalid input or usage"},
	{ExitInternal, "internal error (a bug in kvaudit: please report it)"},
	{ExitInterrupted, "interrupted by SIGINT (Ctrl-C); partial outputs removed"},
	{ExitTerminated, "terminated by SIGTERM; partial outputs removed"},
}

// exitRows lists the exit statuses a command (by name; "" for the root,
// every status) can end with and what each means there: its own results
// (manExits), then bad input and the statuses every command can end with
// (an internal error, a signal). --help and the man pages are written
// from it.
func exitRows(name string) [][2]string {
	var rows [][2]string
	if name == "" {
		for _, e := range exitCodes {
			rows = append(rows, [2]string{fmt.Sprint(e.code), e.meaning})
		}
		return rows
	}
	rows = append(rows, manExits[name]...)
	if len(rows) == 0 {
		rows = append(rows, [2]string{fmt.Sprint(ExitOK), "success"})
	}
	rows = append(rows, [2]string{fmt.Sprint(ExitInvalid), "invalid input or usage, or a file that cannot be read or written: the message names the file and the field"})
	for _, e := range exitCodes {
		if e.code > ExitInvalid {
			rows = append(rows, [2]string{fmt.Sprint(e.code), e.meaning})
		}
	}
	return rows
}

// exitCodeHelp documents a command's exit codes for --help ("" for the
// root: all of them).
func exitCodeHelp(name string) string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, r := range exitRows(name) {
		fmt.Fprintf(&b, "  %-3s  %s\n", r[0], r[1])
	}
	return b.String()
}

// ResultError ends a command whose result (already printed) calls for a
// non-zero exit code: a mismatch, an unverified load, a missed fault.
type ResultError struct {
	Code int
	Msg  string
}

func (e *ResultError) Error() string { return e.Msg }

// UsageError is a command line that cannot be run.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usageErrorf(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// asUsage makes the errors by which the library says what a side argument
// names usage errors (whose usage line is printed): a path that does not
// exist (*layout.NotFoundError), an argument that is neither a path nor
// payload text (*side.NotPayloadError), a directory whose
// subdirectories hold the dumps (*layout.NoDumpError with Sides). The
// library decides what an argument is; this only maps its answer.
func asUsage(err error) error {
	var nf *layout.NotFoundError
	var np *side.NotPayloadError
	var nd *layout.NoDumpError
	var ue *UsageError
	switch {
	case err == nil || errors.As(err, &ue):
		return err
	case errors.As(err, &nf), errors.As(err, &np), errors.As(err, &nd) && len(nd.Sides) > 0:
		return &UsageError{err}
	}
	return err
}

// exitCode maps a command's error to its exit code: nil is ExitOK, a
// ResultError carries its own, a *checksum.InternalError (a recovered
// panic, a failed consistency check: a bug, wherever it is wrapped) is
// ExitInternal, an input not in its format (a *parse.Error, whatever the
// format: dump, manifest, safetensors, record, payload, NIXL log, synth
// configuration) is ExitInvalid, and so is anything else (usage, a
// failure to read or write). Only the type counts: a
// message that merely mentions "internal error" (a file name) is not one.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var re *ResultError
	if errors.As(err, &re) {
		return re.Code
	}
	var ie *checksum.InternalError
	if errors.As(err, &ie) {
		return ExitInternal // a bug, even inside a format error
	}
	if parse.As(err, "") != nil {
		return ExitInvalid
	}
	return ExitInvalid
}
