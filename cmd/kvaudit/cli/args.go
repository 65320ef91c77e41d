package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/verify"
)

// explainArgs replaces cobra's argument count errors ("accepts 2 arg(s),
// received 1") in every command of the tree with a usage error saying
// what the command wants, read from its Use line (Main prints the usage
// line under it).
func explainArgs(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return &UsageError{fmt.Errorf("%s %s; got %s", cmd.Name(), wantedArgs(cmd), givenArgs(args))}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// positionalArgs are the argument names of a Use line: the words after
// the command's name, up to the first flag.
func positionalArgs(cmd *cobra.Command) []string {
	var out []string
	for _, w := range strings.Fields(cmd.Use)[1:] {
		if strings.HasPrefix(w, "-") {
			break
		}
		out = append(out, w)
	}
	return out
}

// wantedArgs says what arguments a command takes.
func wantedArgs(cmd *cobra.Command) string {
	pos := positionalArgs(cmd)
	switch {
	case len(pos) == 0:
		return "takes no arguments"
	case len(pos) == 1 && strings.HasSuffix(pos[0], "..."):
		return "wants at least one " + strings.TrimSuffix(pos[0], "...")
	case len(pos) == 1:
		return "wants one argument, " + pos[0]
	}
	return fmt.Sprintf("wants %d arguments, %s and %s", len(pos), strings.Join(pos[:len(pos)-1], ", "), pos[len(pos)-1])
}

// givenArgs describes the arguments given.
func givenArgs(args []string) string {
	switch len(args) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprintf("one (%q)", args[0])
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf("%d (%s)", len(args), strings.Join(q, " "))
}

// plausiblePayload says whether a side argument that is not an existing
// path can be payload text, to be decoded (and, broken, reported as an
// unverified load): a JSON object, or base64 text (either alphabet) of
// at least 8 characters that starts the way every payload does, a msgpack
// array of 2 or 3 whose first element is an unsigned integer (the
// version). Anything else, such as a mistyped path ("producerdumps"), is
// a usage error.
func plausiblePayload(arg string) bool {
	t := strings.TrimSpace(arg)
	if strings.HasPrefix(t, "{") {
		return true
	}
	if len(t) < 8 || strings.Trim(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_") != "" {
		return false
	}
	head, err := base64.StdEncoding.DecodeString(strings.NewReplacer("-", "+", "_", "/").Replace(t[:4]))
	if err != nil || len(head) < 2 {
		return false
	}
	return (head[0] == 0x92 || head[0] == 0x93) && (head[1] < 0x80 || head[1] >= 0xcc && head[1] <= 0xcf)
}

// checkDiffArg catches what goes wrong with a diff side argument before
// it is read: a path that does not exist (when it looks like one, or is
// not plausible payload text: a mistyped "producerdumps" is a usage
// error, not an unverified load), and a directory holding the sides'
// directories rather than dumps (checkSidePath).
func checkDiffArg(arg string) error {
	if arg == "-" {
		return nil
	}
	_, err := os.Stat(arg)
	switch {
	case err == nil:
		return checkSidePath(arg)
	case !errors.Is(err, fs.ErrNotExist):
		return nil // read as usual, which reports it
	case verify.MissingPath(arg):
		return checkSidePath(arg)
	case !plausiblePayload(arg):
		short := arg
		if len(short) > 40 {
			short = short[:37] + "..."
		}
		return usageErrorf("%q is neither an existing path nor payload text (base64 or JSON): want dumps, a directory, a record file, or what a producer sent", short)
	}
	return nil
}

// checkSidePath explains the two ways a side's path goes wrong before it
// is read: it does not exist (a usage error), or it is a directory that
// holds no dump itself but whose subdirectories do (a root such as synth
// --out writes, holding producer/ and consumer/): it names them.
func checkSidePath(p string) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return usageErrorf("%q does not exist: want a dump (a .safetensors file, or a directory with manifest.json), a directory of dumps, or a record file", p)
	}
	if err != nil || !st.IsDir() || layout.IsDump(p) {
		return nil // read as usual
	}
	if _, _, err := layout.FindDumps([]string{p}); err == nil || !strings.Contains(err.Error(), "holds no dump") {
		return nil // dumps found, or an error of its own
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil
	}
	var sides []string
	for _, e := range entries {
		q := filepath.Join(p, e.Name())
		if e.IsDir() {
			if dumps, _, err := layout.FindDumps([]string{q}); err == nil && len(dumps) > 0 {
				sides = append(sides, q)
			}
		}
	}
	if len(sides) > 0 {
		return usageErrorf("%q holds no dump itself; the dumps are in %s: give one of them", p, orList(quoteAll(sides)))
	}
	return nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}

// checkSidePaths checks every path of a side (checkSidePath).
func checkSidePaths(paths []string) error {
	for _, p := range paths {
		if err := checkSidePath(p); err != nil {
			return err
		}
	}
	return nil
}
