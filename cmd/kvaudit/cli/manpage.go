package cli

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/kvaudit/kvaudit/internal/kernels"
	"github.com/kvaudit/kvaudit/internal/safeio"
)

// manPage is one generated man page: its file name (kvaudit-diff.1) and
// its troff source.
type manPage struct {
	Name string
	Data []byte
}

// manPages renders one section-1 page per available command of root's tree
// (root included): titled after the command (KVAUDIT-DIFF(1)), with the
// help text cobra renders (name, synopsis, description, options, examples)
// and an EXIT STATUS and an ENVIRONMENT section before SEE ALSO. The pages
// say which kvaudit they document (releaseVersion); their date is
// $SOURCE_DATE_EPOCH when set, else today.
func manPages(root *cobra.Command) ([]manPage, error) {
	var pages []manPage
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if c != root && (!c.IsAvailableCommand() || c.IsAdditionalHelpTopicCommand()) {
			return nil
		}
		c.DisableAutoGenTag = true
		header := &doc.GenManHeader{Section: "1", Source: "kvaudit " + releaseVersion(), Manual: "kvaudit manual"}
		var b bytes.Buffer
		if err := doc.GenMan(c, header, &b); err != nil {
			return fmt.Errorf("man page of %q: %w", c.CommandPath(), err)
		}
		pages = append(pages, manPage{
			Name: strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1",
			Data: insertManSections(b.Bytes(), manExitStatus(c)+manEnvironment(c)),
		})
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	return pages, nil
}

// writeManPages writes manPages(root) into dir and returns the files
// written.
func writeManPages(root *cobra.Command, dir string, force bool) ([]string, error) {
	pages, err := manPages(root)
	if err != nil {
		return nil, err
	}
	if err := safeio.MkdirOut(dir); err != nil {
		return nil, err
	}
	var files []string
	for _, p := range pages {
		f := filepath.Join(dir, p.Name)
		if err := safeio.WriteFile(f, p.Data, force); err != nil {
			return files, err
		}
		files = append(files, f)
	}
	return files, nil
}

// insertManSections puts extra troff sections before SEE ALSO (at the end
// when there is none).
func insertManSections(page []byte, sections string) []byte {
	at := bytes.Index(page, []byte("\n.SH SEE ALSO\n"))
	if at < 0 {
		return append(page, sections...)
	}
	at++
	out := make([]byte, 0, len(page)+len(sections))
	out = append(out, page[:at]...)
	out = append(out, sections...)
	return append(out, page[at:]...)
}

// manExits lists, per command, the exit statuses it can end with and what
// each means there (docs/spec.md §11); commands not listed succeed or fail on bad
// input. The root's page lists every status.
var manExits = map[string][][2]string{
	"diff": {
		{"0", "every request verified (or, with --allow-unverified, nothing mismatches)"},
		{"1", "mismatch: some compared block differs, in any replica copy, or an audit (--audit-tail, --stored) has a finding"},
		{"2", "unverified: some load could not be verified (no or invalid producer checksums, a missing rank, a fingerprint that differs, ...)"},
	},
	"checksum": {
		{"0", "the checksums were computed (with --stored: every stored checksum listed for a full block matches)"},
		{"1", "with --stored: some block differs from the checksum stored with it"},
		{"2", "nothing could be checksummed (the side holds no request, or every group is skipped; -o table, markdown, json or payload), or with --stored no request lists stored_checksums for a full block: nothing stored to compare"},
	},
	"transfers": {
		{"0", "every invariant holds for every transfer and request the logs name"},
		{"1", "an invariant is violated (confined, aligned, covered, zeroed, written-twice, failed)"},
		{"2", "some of the logs cannot be resolved to the dumps (no addresses in a dump, an agent no dump names, a list the recorder did not know)"},
	},
	"scrub": {
		{"0", "every file and record verified against the checksum its engine stored (or, with --allow-unverified, none mismatches)"},
		{"1", "mismatch: some file or record differs from its stored checksum, or its frame, trailer or header is wrong"},
		{"2", "unverified: some file or record has no stored checksum to check (no xattr, no trailer, no CRC), and none mismatches"},
	},
	"campaign": {
		{"0", "every detectable fault was detected by the expected detector and localised, and no clean control was flagged"},
		{"1", "a fault was missed or mislocalised, or a clean control was flagged"},
	},
}

// manExitStatus is a page's EXIT STATUS section.
func manExitStatus(c *cobra.Command) string {
	name := ""
	if c.HasParent() {
		name = c.Name()
	}
	rows := exitRows(name)
	var b strings.Builder
	b.WriteString(".SH EXIT STATUS\n")
	for _, r := range rows {
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", r[0], roffText(r[1]))
	}
	return b.String()
}

// manEnvironment is a page's ENVIRONMENT section: KVAUDIT_<FLAG> for each
// of the command's flags, the CUDA runner's variables where an --engine
// flag can start it, NO_COLOR, and where kvaudit.yaml is looked for.
func manEnvironment(c *cobra.Command) string {
	var b strings.Builder
	item := func(name, text string) {
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", roffText(name), roffText(text))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	if !c.HasParent() {
		b.WriteString(roffText("Every flag of every command can be set as KVAUDIT_<FLAG>, upper case, dashes as underscores (KVAUDIT_ENGINE=ref, KVAUDIT_OUTPUT=json). A flag given on the command line wins over the variable, the variable over kvaudit.yaml.") + "\n")
	}
	var flags []*pflag.Flag
	add := func(f *pflag.Flag) {
		// --config is read from the command line only (it names the
		// file the other settings come from).
		if f.Name != "help" && f.Name != "config" && !f.Hidden && !slices.ContainsFunc(flags, func(g *pflag.Flag) bool { return g.Name == f.Name }) {
			flags = append(flags, f)
		}
	}
	c.NonInheritedFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	hasEngine := false
	for _, f := range flags {
		item(envName(f.Name), "sets --"+f.Name+" when the command line does not")
		// synth's and campaign's --engine name whose caches, not a
		// checksum engine: only a checksum engine starts the runner.
		hasEngine = hasEngine || f.Name == "engine" && c.Name() != "synth" && c.Name() != "campaign"
	}
	if hasEngine || !c.HasParent() {
		item(kernels.RunnerEnv, "the kvaudit-cuda runner that --engine cuda (or auto) starts; by default kvaudit-cuda beside the kvaudit executable, else on PATH")
		item("KVAUDIT_CUDA_DEVICE", "passed to the runner: the CUDA device it uses (default 0)")
	}
	item("NO_COLOR", "when set to a non-empty value, no color in the output (https://no-color.org)")
	item("XDG_CONFIG_HOME", "kvaudit.yaml is read from --config, else the working directory, else $XDG_CONFIG_HOME/kvaudit (default ~/.config/kvaudit)")
	if c.Name() == "man" {
		item("SOURCE_DATE_EPOCH", "the date the pages carry, in seconds since 1970 (reproducible builds); default today")
	}
	return b.String()
}

// roffText escapes text for a troff paragraph: backslashes, dashes (so
// they are not hyphens) and a leading dot or quote.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
