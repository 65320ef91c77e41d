package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kvaudit/kvaudit/internal/termtext"
	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/internal/blockspan"
	"github.com/kvaudit/kvaudit/internal/report"
	"github.com/kvaudit/kvaudit/internal/safeio"
	"github.com/kvaudit/kvaudit/internal/synth"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/side"
	"github.com/kvaudit/kvaudit/verify"
)

// DemoOptions are the settings of `kvaudit demo`.
type DemoOptions struct {
	IO *Streams
	// Dir holds the demo's dumps (--out); empty means a temporary
	// directory that is removed afterwards.
	Dir  string
	Seed uint64
	// HTML is the file the HTML report is written to (--html; default
	// DIR/report.html with --out DIR, else kvaudit-demo.html here).
	HTML    string
	command string
}

// NewCmdDemo builds `kvaudit demo`.
func NewCmdDemo(s *Streams, runF func(context.Context, *DemoOptions) error) *cobra.Command {
	opts := &DemoOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole story on built-in data",
		Long: `Demo needs no input. It synthesizes a producer (TP1, FlashAttention layout)
and a consumer that loaded the same KV with another TP size, layout and
block ids (TP2, HND), checksums both and shows they agree, then flips one
bit of the consumer's KV and shows that exactly one block's value changes,
and ends on the verdict kvaudit diff gives: a mismatch at that block,
drilled down to the layer, head, token and bit. It writes the same verdict as
an HTML report (kvaudit diff --html), for a browser, and says where.`,
		Example: `  # run it
  $ kvaudit demo

  # keep the dumps to play with (and the report, as /tmp/kvdemo/report.html)
  $ kvaudit demo --out /tmp/kvdemo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Dir = cfg.String("out")
			if cfg.Changed("dir") {
				opts.Dir = cfg.String("dir")
			}
			opts.Seed = cfg.Uint64("seed")
			opts.HTML = cfg.String("html")
			opts.command = commandLine(opts.IO, cmd, args)
			if err := checkOutputFile("--html", opts.HTML, nil); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return demoRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().String("out", "", "directory to write the demo's dumps into, kept (default: a temporary one, removed)")
	cmd.Flags().String("dir", "", "")
	_ = cmd.Flags().MarkDeprecated("dir", "use --out")
	cmd.Flags().Uint64("seed", 42, "seed of the synthetic KV")
	cmd.Flags().String("html", "", "the HTML report's file (default DIR/report.html with --out DIR, else kvaudit-demo.html; replaced if it exists)")
	return cmd
}

// demoSides are the producer and consumer the demo synthesizes.
func demoSides(seed uint64) (producer, consumer synth.Config) {
	producer = synth.Config{Preset: "llama", Layers: 4, TP: 1, Layout: "flash", Requests: 1, Tokens: 40, Seed: seed, Role: "producer"}
	consumer = producer
	consumer.TP, consumer.Layout, consumer.Role = 2, "hnd", "consumer"
	return producer, consumer
}

func demoRun(ctx context.Context, opts *DemoOptions) error {
	w := opts.IO.Out
	dir := opts.Dir
	if dir == "" {
		tmp, err := safeio.TempDir("", "kvaudit-demo-")
		if err != nil {
			return err
		}
		defer safeio.RemoveTemp(tmp)
		dir = tmp
	}
	pc, cc := demoSides(opts.Seed)
	say := func(format string, args ...any) { demoSay(opts.IO, format, args...) }
	say("1. Synthesize a producer (%s, tp %d, %s layout) and a consumer that loaded the same KV (tp %d, %s layout, other block ids) in %s\n\n",
		pc.Preset, pc.TP, pc.Layout, cc.TP, cc.Layout, dir)
	ppaths, err := synth.Write(dir, pc)
	if err != nil {
		return err
	}
	cpaths, err := synth.Write(dir, cc)
	if err != nil {
		return err
	}
	side := func(paths []string) (*side.Checks, error) {
		res, err := side.Checksum(ctx, side.Input{Paths: paths}, side.ChecksumOptions{})
		if err != nil {
			return nil, err
		}
		return res.Checks, nil
	}
	prod, err := side(ppaths)
	if err != nil {
		return err
	}
	cons, err := side(cpaths)
	if err != nil {
		return err
	}
	say("2. Checksum both sides: one value per (group, block position), whatever the TP split or layout\n\n")
	if err := demoTable(w, opts.IO, prod, cons, nil); err != nil {
		return err
	}
	// Flip one bit of the consumer's KV: rank 1 holds heads 4..7.
	target, err := demoFlip(cpaths[1])
	if err != nil {
		return err
	}
	say("3. Flip one bit of the consumer's KV: %s\n\n", target)
	flipped, err := side(cpaths)
	if err != nil {
		return err
	}
	if err := demoTable(w, opts.IO, prod, flipped, cons); err != nil {
		return err
	}
	say("4. Compare them as kvaudit diff does: the verdict per request and group, and the drill-down to layer, head, token and bit\n\n")
	res, err := demoDiff(ctx, opts.IO, ppaths, cpaths)
	if err != nil {
		return err
	}
	html := opts.HTML
	switch {
	case html != "":
	case opts.Dir != "":
		html = filepath.Join(opts.Dir, "report.html")
	default:
		html = "kvaudit-demo.html"
	}
	info := report.HTMLInfo{Command: opts.command, Producer: filepath.Join(dir, pc.Role), Consumer: filepath.Join(dir, cc.Role),
		Exit: exitCode(resultExit(res, false)), Version: versionString(), Time: time.Now()}
	if err := safeio.WriteOutput(html, func(w io.Writer) error { return report.RenderDiffHTML(w, res, info) }); err != nil {
		return err
	}
	say("\n5. The same verdict for a browser (block maps, a heatmap of layers by heads, the drill-down): %s\n", html)
	if opts.Dir != "" {
		say("\nThe dumps are kept in %s: run it yourself with\n  kvaudit diff %s %s\n",
			opts.Dir, filepath.Join(dir, pc.Role), filepath.Join(dir, cc.Role))
	} else {
		// The drill-down names files there: say they are gone. Each line
		// fits 80 columns.
		say("\nThe dumps were temporary and are removed, the drill-down's files with them:\n  %s\nkvaudit demo --out DIR keeps them, to run\n  kvaudit diff DIR/%s DIR/%s\n",
			dir, pc.Role, cc.Role)
	}
	return nil
}

// demoSay prints a paragraph of the demo's story, wrapped to the
// terminal's width on a terminal.
func demoSay(s *Streams, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if s.OutTerminal && s.Width > 0 {
		text = termtext.Wrap(text, s.Width)
	}
	fmt.Fprint(s.Out, text)
}

// demoDiff compares the demo's producer and consumer dumps as kvaudit
// diff does (the mismatch drilled down), prints the verdict table and
// returns the result.
func demoDiff(ctx context.Context, s *Streams, ppaths, cpaths []string) (*verify.Result, error) {
	res, err := verify.Compare(ctx, side.Input{Paths: ppaths}, side.Input{Paths: cpaths}, verify.CompareOptions{})
	if err != nil {
		return nil, err
	}
	return res, report.RenderDiff(s.Out, res.Diff, report.FormatTable, report.DiffOptions{Style: tableStyle(s)})
}

// demoTable prints the producer's and consumer's check 0 side by side and
// says whether they agree; before, when given, marks what changed.
func demoTable(w io.Writer, s *Streams, prod, cons, before *side.Checks) error {
	t := &report.Table{
		Header: []string{"request", "group", "position", "producer check 0", "consumer check 0", "compared"},
		Drop:   []string{"group"},
		Whole:  []string{"request"},
	}
	changed := 0
	for _, pr := range prod.Requests {
		cr := cons.Requests[0]
		for _, pg := range pr.Groups {
			cg := cr.Group(pg.ID)
			for i := range pg.Positions() {
				pv, cv := pg.Checks[0][i], cg.Checks[0][i]
				mark := report.Cell{Text: "equal", Tone: report.Good}
				if pv != cv {
					mark = report.Cell{Text: "DIFFERS", Tone: report.Bad}
					changed++
				}
				t.Add(report.C("%s", pr.ID), report.C("%d", pg.ID), report.C("%d", pg.Start+i),
					report.C("%s", layout.Hex64(pv)), report.C("%s", layout.Hex64(cv)), mark)
			}
		}
	}
	switch {
	case changed == 0:
		t.Notes = append(t.Notes, "Every block agrees: the consumer holds exactly the producer's KV.")
	case before != nil:
		t.Notes = append(t.Notes, fmt.Sprintf("%d block(s) changed: the flipped bit is found and pinned to its block.", changed))
	}
	if err := t.Render(w, report.FormatTable, tableStyle(s)); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

// demoFlip flips bit 2 of byte 3 of the cell of token 20 (block position
// 1), local head 1, of the second layer in a consumer rank's dump, and
// describes it.
func demoFlip(path string) (string, error) {
	d, err := layout.Open(path)
	if err != nil {
		return "", err
	}
	c := d.Groups[0].Caches[1]
	req := &d.Manifest.Requests[0]
	span, _, err := blockspan.Of(req, d.Groups[0].Group)
	if err != nil {
		d.Close()
		return "", err
	}
	S := d.Groups[0].Group.BlockSize
	token, head := 20, 1
	block := span.Blocks[token/S-span.Start]
	off := c.Cells.FileOffset + c.Cells.CellAddr(block, token%S, head) + c.Cells.Runs[0].Offset + 3
	file := c.Cells.File
	desc := fmt.Sprintf("layer %d (%s), global head %d, token %d (block position %d, block id %d), byte 3 of the cell, in %s",
		c.Number, c.Layer.Name, c.HeadBase+head, token, token/S, block, filepath.Base(file))
	d.Close()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return "", err
	}
	b[0] ^= 1 << 2
	if _, err := f.WriteAt(b, off); err != nil {
		return "", err
	}
	return desc, nil
}
