package cli

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"
	"github.com/spf13/cobra"
)

// wrapHelpOutput makes root's help (--help, kvaudit help CMD) fit the
// terminal stdout is, or 80 columns when it is not one: cobra writes
// every line of a flag's or a kind's description on one line (up to 279
// characters), which a terminal wraps mid-word.
func wrapHelpOutput(root *cobra.Command, s *Streams) {
	help := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		out := c.OutOrStdout()
		var b bytes.Buffer
		c.SetOut(&b)
		help(c, args)
		c.SetOut(out)
		width := 80
		if s.OutTerminal && s.Width > 0 {
			width = s.Width
		}
		fmt.Fprint(out, wrapHelp(b.String(), width))
	})
}

// wrapHelp wraps the lines of text wider than width at spaces. A line's
// continuation hangs under its description: where the text resumes after
// the first run of two or more spaces (a flag's or kind's description, a
// table's last column), when that is in the line's first half, else under
// the line's indentation. A shell command of an example ("  $ kvaudit
// ...") is continued with a backslash, so that it still runs when copied,
// and an example's comment ("  # ...") with "# ".
// A word wider than the room left stays whole.
func wrapHelp(text string, width int) string {
	lines := strings.Split(text, "\n")
	var out []string
	for _, l := range lines {
		if ansi.StringWidth(l) <= width {
			out = append(out, l)
			continue
		}
		lead := len(l) - len(strings.TrimLeft(l, " "))
		// The first line keeps l up to start as it is; the words after it
		// are filled in.
		start, indent, tail, cont := lead, lead, "", ""
		switch {
		case strings.HasPrefix(l[lead:], "$ "):
			indent, tail = lead+4, " \\"
		case strings.HasPrefix(l[lead:], "# "):
			cont = "# " // an example's comment stays one
		default:
			if i := strings.Index(l[lead:], "  "); i > 0 {
				start = lead + i + len(l[lead+i:]) - len(strings.TrimLeft(l[lead+i:], " "))
				if start <= width/2 {
					indent = start
				}
			}
		}
		words := strings.Fields(l[start:])
		cur := l[:start]
		first := true
		for _, w := range words {
			sep := " "
			if first {
				sep = ""
			}
			if !first && ansi.StringWidth(cur)+len(sep)+ansi.StringWidth(w)+len(tail) > width {
				out = append(out, cur+tail)
				cur, sep = strings.Repeat(" ", indent)+cont, ""
			}
			cur += sep + w
			first = false
		}
		out = append(out, cur)
	}
	return strings.Join(out, "\n")
}
