package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/layout"
)

// ErrorFormat is the format of the document a command asked for -o json
// writes on stdout when it fails without printing its own (exit 3, 4,
// 130, 143): besides the stderr line, so a program that parses stdout
// always gets JSON (docs/schemas/kvaudit-error.schema.json).
const ErrorFormat = "kvaudit-error/1"

// errorJSON is kvaudit-error/1.
type errorJSON struct {
	Format   string `json:"format"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
	// Field is what the error names, when it names one: a flag
	// ("--junit"), an environment variable, a manifest field
	// ("groups[0].layers[1].source.file"), a side ("consumer"); "" when
	// none.
	Field string `json:"field"`
	// File is the file the error is about, when known.
	File string `json:"file,omitempty"`
}

// writeErrorJSON writes err as kvaudit-error/1.
func writeErrorJSON(w io.Writer, err error, code int) {
	doc := errorJSON{Format: ErrorFormat, Message: err.Error(), ExitCode: code}
	doc.Field, doc.File = errorField(err)
	b, _ := json.MarshalIndent(doc, "", "  ")
	fmt.Fprintf(w, "%s\n", b)
}

// namedFields are the patterns of what an error message may start with: a
// flag, a variable, a side. They are compiled when an error is written as
// JSON, not at start-up (which every command pays).
var namedFields = sync.OnceValue(func() []*regexp.Regexp {
	return []*regexp.Regexp{
		regexp.MustCompile(`^(?:unknown flag: )?(--[a-z0-9][a-z0-9-]*)\b`),
		regexp.MustCompile(`^environment variable (KVAUDIT_[A-Z0-9_]+)`),
		regexp.MustCompile(`^(producer|consumer)\b`),
	}
})

// errorField finds what an error names: the field and file of the
// outermost *parse.Error (a dump, manifest, safetensors file, record,
// payload, NIXL log), else a flag or variable its
// message starts with, or the side it is about.
func errorField(err error) (field, file string) {
	if pe := parse.As(err, ""); pe != nil {
		field, file = pe.Field, pe.File
	}
	var rd *layout.ReadError
	if file == "" && errors.As(err, &rd) {
		file = rd.Path
	}
	var nf *layout.NotFoundError
	if file == "" && errors.As(err, &nf) {
		file = nf.Path
	}
	if field != "" {
		return field, file
	}
	msg := err.Error()
	for _, x := range namedFields() {
		if m := x.FindStringSubmatch(msg); m != nil {
			return m[1], file
		}
	}
	return "", file
}

// wantsJSON says whether the command line asked for -o json: the
// command's resolved -o (Streams.JSON), or, where the command line could
// not be parsed that far, an -o json among args or KVAUDIT_OUTPUT.
func wantsJSON(s *Streams, cmd *cobra.Command, args []string) bool {
	if s.JSON {
		return true
	}
	if cmd != nil {
		if f := cmd.Flags().Lookup("output"); f != nil && f.Changed {
			return f.Value.String() == "json"
		}
	}
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				return args[i+1] == "json"
			}
		case a == "-ojson" || a == "-o=json" || a == "--output=json":
			return true
		}
	}
	return strings.TrimSpace(os.Getenv("KVAUDIT_OUTPUT")) == "json"
}
