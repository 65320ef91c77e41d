package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
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
