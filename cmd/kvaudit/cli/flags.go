package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/inject"
	"github.com/kvaudit/kvaudit/internal/synth"
)

// This file holds kvaudit's flag vocabulary: the -o values of each
// command and the values of every enum flag, for parsing, help and shell
// completion (flags_test.go checks the whole command tree against it).

// outputFormats are the -o values of each command: json everywhere,
// markdown wherever there is a table, junit wherever there is a verdict;
// the first is the default.
var outputFormats = map[string][]string{
	"checksum":  {"table", "json", "record", "payload", "markdown"},
	"inspect":   {"table", "json", "markdown"},
	"diff":      {"table", "json", "markdown", "junit"},
	"transfers": {"table", "json", "markdown", "junit"},
	"inject":    {"table", "json", "markdown"},
	"campaign":  {"table", "json", "markdown", "junit"},
	"bench":     {"table", "json", "markdown"},
	"scrub":     {"table", "json", "markdown", "junit"},
}

// orList writes values as "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// addOutputFlag adds -o/--output with the command's formats (by its
// name) to its help; extra says more about some of them.
func addOutputFlag(cmd *cobra.Command, extra string) {
	formats := outputFormats[cmd.Name()]
	help := "output: " + orList(formats)
	if extra != "" {
		help += " (" + extra + ")"
	}
	cmd.Flags().StringP("output", "o", formats[0], help)
}

// outputOf checks the command's -o value against its formats.
func outputOf(cfg *config) (string, error) {
	return parseFormat(cfg.String("output"), outputFormats[cfg.cmd.Name()]...)
}

// engineNames are the values of --engine (bench offers cpu and cuda).
var engineNames = []string{"cpu", "ref", "cuda", "auto"}

// faultNames are the fault kinds inject takes (none: only the
// preparations).
func faultNames() []string {
	names := []string{string(inject.None)}
	for _, k := range inject.Kinds() {
		names = append(names, string(k))
	}
	return names
}

// enumValues returns the values an enum flag of cmd takes, nil for a flag
// that is not an enum.
func enumValues(cmd *cobra.Command, flag string) []string {
	switch flag {
	case "output":
		return outputFormats[cmd.Name()]
	case "engine":
		if cmd.Name() == "bench" {
			return []string{"cpu", "cuda"}
		}
		return engineNames
	case "fault":
		if cmd.Name() == "campaign" {
			return faultNames()[1:]
		}
		return faultNames()
	case "color":
		return colorModes
	case "preset":
		return synth.Presets
	case "layout":
		return synth.Layouts
	case "format":
		return synth.Formats
	case "conv-layout":
		return synth.ConvLayouts
	case "conv-dtype":
		return []string{"bfloat16", "float32"}
	case "role":
		return []string{"producer", "consumer"}
	case "payload-form":
		return []string{"nested", "flat"}
	case "numbering":
		return []string{"request", "block"}
	}
	return nil
}

// registerCompletions makes every enum flag of the tree complete its
// values (not file names), a value of a list flag after the last comma.
func registerCompletions(root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		visit := func(f *pflag.Flag) {
			values := enumValues(c, f.Name)
			if values == nil {
				return
			}
			list := strings.HasSuffix(f.Value.Type(), "Slice")
			_ = c.RegisterFlagCompletionFunc(f.Name, func(_ *cobra.Command, _ []string, typed string) ([]string, cobra.ShellCompDirective) {
				prefix := ""
				if i := strings.LastIndex(typed, ","); list && i >= 0 {
					prefix = typed[:i+1]
				}
				var out []string
				for _, v := range values {
					if strings.HasPrefix(prefix+v, typed) && !slices.Contains(strings.Split(prefix, ","), v) {
						out = append(out, prefix+v)
					}
				}
				return out, cobra.ShellCompDirectiveNoFileComp
			})
		}
		c.Flags().VisitAll(visit)
		c.PersistentFlags().VisitAll(visit)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
