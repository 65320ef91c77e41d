package side

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kvaudit/kvaudit/layout"
)

// openArg resolves one argument: "-" (payload text or JSON on stdin), a
// dump or directory (dumps and records), a record file, a payload file,
// a glob pattern of such paths (layout.FindDumps), or, when arg names
// nothing on disk, payload text (payloadText, or any text that cannot be
// a path). An argument that names nothing and is not
// payload text is a missing path (a *layout.NotFoundError) when it was
// meant as one (meantAsPath), else a *NotPayloadError.
func openArg(arg string, stdin io.Reader) (*Source, error) {
	if arg == "-" {
		if stdin == nil {
			return nil, errors.New(`"-" reads the payload from Stdin, and there is none`)
		}
		data, err := readPayloadInput(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return payloadSide("stdin", data)
	}
	st, err := os.Stat(arg)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !cannotBePath(arg, err) {
			return nil, err
		}
		switch {
		case errors.Is(err, fs.ErrNotExist) && layout.IsPattern(arg) && !strings.HasPrefix(strings.TrimSpace(arg), "{"):
			// A glob (no payload text holds *, ? or [ outside JSON): the
			// paths it matches are the side.
			return openPaths([]string{arg})
		case cannotBePath(arg, err) || payloadText(arg):
			return payloadSide(fmt.Sprintf("%q", shortArg(arg)), []byte(arg))
		case meantAsPath(arg):
			return nil, &layout.NotFoundError{Path: arg, Err: err}
		}
		return nil, &NotPayloadError{Arg: arg}
	}
	if st.IsDir() || strings.HasSuffix(arg, ".safetensors") {
		return openPaths([]string{arg})
	}
	data, err := readPayloadFile(arg)
	if err != nil {
		return nil, err
	}
	if looksLikeRecord(data) {
		recs, err := parseRecordFile(arg, data)
		if err != nil {
			return nil, err
		}
		return &Source{Records: recs, recordFiles: []string{arg}, name: fmt.Sprintf("%q", arg), files: []string{arg}}, nil
	}
	s, err := payloadSide(fmt.Sprintf("%q", arg), data)
	if s != nil {
		s.files = []string{arg}
	}
	return s, err
}

// NotPayloadError is an argument that names nothing on disk and is not
// payload text either (a mistyped path such as "producerdumps"): it is
// neither, and is refused rather than read as a broken payload.
type NotPayloadError struct{ Arg string }

func (e *NotPayloadError) Error() string {
	return fmt.Sprintf("%q is neither an existing path nor payload text (base64 or JSON): want dumps, a directory, a record file, or what a producer sent", shortArg(e.Arg))
}

// base64Chars are the characters of both base64 alphabets (standard and
// URL-safe, so that the decoder can say what is wrong with the latter).
const base64Chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_"

// cannotBePath says whether an argument cannot name a file at all, err
// being what os.Stat said of it: a name too long for the system (a
// kv_transfer_params of a few hundred bytes) or one holding a NUL byte.
// Such an argument is payload text.
func cannotBePath(arg string, err error) bool {
	return errors.Is(err, syscall.ENAMETOOLONG) || strings.IndexByte(arg, 0) >= 0
}

// payloadText says whether an argument that names nothing on disk is
// payload text: a JSON object, or base64 text (either alphabet) of at
// least 8 characters, not meant as a path (meantAsPath), that starts the
// way every payload does: a msgpack array of 2 or 3 whose first element
// is an unsigned integer (the version).
func payloadText(arg string) bool {
	t := strings.TrimSpace(arg)
	if strings.HasPrefix(t, "{") {
		return true
	}
	if len(t) < 8 || meantAsPath(arg) {
		return false
	}
	head, err := base64.StdEncoding.DecodeString(strings.NewReplacer("-", "+", "_", "/").Replace(t[:4]))
	if err != nil || len(head) < 2 {
		return false
	}
	return (head[0] == 0x92 || head[0] == 0x93) && (head[1] < 0x80 || head[1] >= 0xcc && head[1] <= 0xcf)
}

// meantAsPath says whether an argument that names nothing on disk was
// meant as a path: it is not a JSON object, and holds characters outside
// the base64 alphabets, or a "/" after an existing directory.
func meantAsPath(arg string) bool {
	t := strings.TrimSpace(arg)
	if strings.HasPrefix(t, "{") {
		return false
	}
	if strings.Trim(t, base64Chars) != "" {
		return true
	}
	if dir := filepath.Dir(t); dir != "." {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// shortArg abbreviates a long argument (payload text) for messages.
func shortArg(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
