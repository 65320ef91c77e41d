package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/layout"
)

// InspectOptions are the settings of `kvaudit inspect`.
type InspectOptions struct {
	IO     *Streams
	Paths  []string
	Output string
}

// NewCmdInspect builds `kvaudit inspect`.
func NewCmdInspect(s *Streams, runF func(context.Context, *InspectOptions) error) *cobra.Command {
	opts := &InspectOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "inspect DUMP|DIR...",
		Short: "Show what dumps hold: groups, layers, layouts, heads, sizes, what is skipped",
		Long: `Inspect opens dumps exactly as checksum does and shows what it found: each
group with its kind and block size, each distinct cache with its layer
number, layout, heads (local range and global count), replicas, cell size
and bytes, KV-sharing aliases, and the reason a group cannot be
checksummed. Use it to check a dump written by your own exporter.`,
		Example: `  # what a synthesized side holds
  $ kvaudit inspect out/producer

  # machine-readable
  $ kvaudit inspect -o json out/consumer/rank-0-1.safetensors`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Paths = args
			if opts.Output, err = outputOf(cfg); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return inspectRun(cmd.Context(), opts)
		},
	}
	addOutputFlag(cmd, "")
	return cmd
}

func inspectRun(_ context.Context, opts *InspectOptions) error {
	paths, rest, err := layout.FindDumps(opts.Paths)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return &layout.NotDumpError{Path: rest[0]}
	}
	// Each dump on its own (not layout.OpenPaths): inspect shows dumps of
	// different sides side by side.
	var dumps []*layout.Dump
	// A closure, so that it closes the dumps opened below (a plain defer
	// would evaluate dumps now, while it is nil), also when one fails to
	// open.
	defer func() { layout.CloseAll(dumps) }()
	for _, p := range paths {
		d, err := layout.Open(p)
		if err != nil {
			return err
		}
		dumps = append(dumps, d)
	}
	in := report.NewInspectJSON(dumps)
	if opts.Output == "json" {
		return report.WriteJSON(opts.IO.Out, in)
	}
	return opts.IO.renderTables(opts.Output, report.InspectTables(in)...)
}
