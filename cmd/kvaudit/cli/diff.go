package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/checksum/drill"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/report"
)

func init() {
	extraCommands = append(extraCommands, func(s *Streams) *cobra.Command { return NewCmdDiff(s, nil) })
}

// DiffOptions are the settings of `kvaudit diff`.
type DiffOptions struct {
	IO *Streams
	// Producer and Consumer are the two sides as given (see NewCmdDiff).
	Producer, Consumer string
	Output             string
	Requests           []string
	AllowUnverified    bool
	// AllowedBy is the configuration file and line that set
	// AllowUnverified, when no flag or variable did ("" otherwise).
	AllowedBy string
	Engine    checksum.Engine
	// NoDrill skips the drill-down; MaxDetails caps its details per
	// request (0: drill.DefaultMaxDetails, negative: no cap).
	NoDrill    bool
	MaxDetails int
	// AuditTail and Stored run the consumer audits (inject.go).
	AuditTail, Stored bool
	// JUnit, when set, is a file to write the JUnit report to as well
	// (--junit FILE); started is when the command started (its time).
	JUnit   string
	started time.Time
	// Strict makes any loaded block that was not compared unverified.
	Strict bool
}

// NewCmdDiff builds `kvaudit diff`. runF replaces the run function in
// tests.
func NewCmdDiff(s *Streams, runF func(context.Context, *DiffOptions) error) *cobra.Command {
	opts := &DiffOptions{IO: s}
	cmd := &cobra.Command{
		Use:   "diff PRODUCER CONSUMER",
		Short: "Compare what a producer sent with what a consumer loaded: verdicts per request and group",
		Long: `Diff compares a consumer's KV cache with its producer's, request by request
and group by group, with vLLM's verdict rules: verified, mismatch (with the
consumer's block positions and the replica copies that differ) or unverified
(with a fixed reason: no or invalid checksums, a missing rank, other layers,
block sizes that are not multiples, ...). Sides may differ in TP, PP, memory
layout and block size.

Each side is one argument: a dump, a directory of dumps (and/or records), a
record file (checksum --partial -o record), or, for the producer, what it
sent: a payload as base64 text (the argument itself, or a file holding it,
or - for stdin), a JSON object with a "kv_checksums" key (vLLM's
kv_transfer_params), or the JSON map of request id to payload that
checksum -o payload prints. An argument that is not an existing path is read
as payload text. A bare payload pairs with the consumer request --request
names, or with the consumer's only request; otherwise requests pair by id, or
by a consumer request's producer_id. The consumer must be dumps or records.

A flat payload (what vLLM's published KV checksum code sends) is compared in
block numbering and judged on the positions both sides cover, as vLLM's
consumer does; --strict makes a loaded block it does not cover unverified.
Payloads are decoded as vLLM's consumer decodes them, each leniency noted.

When both sides are dumps, every mismatching block is drilled down to the
layers, global heads, replica copies and tokens whose cells differ, with a
hint of what it looks like (1 bit flipped, zeroed, heads 2<->5 swapped, holds
the block of position 3, holds KV of request req-4, random bytes, ...).

` + exitCodeHelp("diff"),
		Example: `  # compare a producer's and a consumer's dumps
  $ kvaudit diff out/producer out/consumer

  # what a producer sent (vLLM's kv_transfer_params) against a consumer's dump
  $ kvaudit diff kv_transfer_params.json out/consumer --request req-0

  # payloads printed by checksum, a CI report, unverified loads accepted
  $ kvaudit checksum -o payload out/producer > payloads.json
  $ kvaudit diff payloads.json records/ -o junit --allow-unverified > diff.xml`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := newConfig(cmd)
			if err != nil {
				return err
			}
			opts.Producer, opts.Consumer = args[0], args[1]
			if opts.Output, err = parseFormat(cfg.String("output"), "table", "json", "markdown", "junit"); err != nil {
				return err
			}
			opts.Requests = cfg.Strings("request")
			opts.AllowUnverified = cfg.Bool("allow-unverified")
			opts.AllowedBy, _ = cfg.FromFile("allow-unverified")
			opts.NoDrill = cfg.Bool("no-drill")
			opts.MaxDetails = cfg.Int("max-details")
			opts.AuditTail, opts.Stored = cfg.Bool("audit-tail"), cfg.Bool("stored")
			opts.JUnit, opts.started = cfg.String("junit"), time.Now()
			opts.Strict = cfg.Bool("strict")
			if opts.Engine, err = newEngine(cfg.String("engine"), cfg.Int("threads"), s.Err); err != nil {
				return err
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return diffRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringP("output", "o", "table", "output: table, json, markdown or junit")
	f.StringSlice("request", nil, "compare only this consumer request id (repeatable); names the request a bare payload is for")
	f.Bool("allow-unverified", false, "exit 0 when nothing mismatches, even if some load is unverified")
	f.String("engine", "cpu", engineHelp)
	f.Int("threads", 0, "threads of the cpu engine (default GOMAXPROCS)")
	f.Bool("no-drill", false, "skip the drill-down of mismatches to layers, heads and tokens")
	f.Int("max-details", drill.DefaultMaxDetails, "drill-down details per request at most (-1: no cap)")
	f.Bool("audit-tail", false, "also audit the consumer's dumps: every byte past the transferred range is zero")
	f.String("junit", "", "also write the JUnit XML report to this file (the table, or -o, still printed)")
	f.Bool("stored", false, "also check the consumer's blocks against the stored checksums in its manifests")
	f.Bool("strict", false, "a loaded block the producer's checksums do not cover (a flat payload is judged on the overlap, as vLLM does) makes its group unverified")
	return cmd
}

// diffSide is one side of a comparison: dumps and records, or payloads.
type diffSide struct {
	in *sideInput // dumps and records; nil for payloads
	// payloads: one bare payload (bare, pairs with one consumer request)
	// or a map of producer request id to payload.
	bare    *checksum.RequestChecks
	byID    []*checksum.RequestChecks
	payload bool
	// notes say why payloads were not decoded, by producer request id
	// ("" for a bare payload).
	notes map[string]string
}

func (s *diffSide) Close() {
	if s.in != nil {
		s.in.Close()
	}
}

// flat says whether the side holds a flat payload (block-numbered values).
func (s *diffSide) flat() bool {
	for _, r := range append([]*checksum.RequestChecks{s.bare}, s.byID...) {
		if r != nil && slices.ContainsFunc(r.Groups, func(g *checksum.GroupChecks) bool { return g.FlatOnly }) {
			return true
		}
	}
	return false
}

// dumpsOnly says whether the side is all dumps (so the drill-down can
// read its cells).
func (s *diffSide) dumpsOnly() bool {
	return s.in != nil && len(s.in.records) == 0 && len(s.in.dumps) > 0
}

func diffRun(ctx context.Context, opts *DiffOptions) error {
	if err := checkDiffArg(opts.Consumer); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if err := checkDiffArg(opts.Producer); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	cside, err := readDiffSide(opts.Consumer, opts.IO.In)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer cside.Close()
	if cside.payload {
		return usageErrorf("consumer %q is a payload: the consumer must be dumps or records (a payload is what a producer sends)", opts.Consumer)
	}
	pside, err := readDiffSide(opts.Producer, opts.IO.In)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer pside.Close()

	// A flat payload (vLLM's published form) is compared block-numbered:
	// the consumer's values in both numberings, from one pass where the
	// engine can (SPEC section 1).
	copts := checksum.Options{Engine: opts.Engine, Requests: opts.Requests, BlockValues: pside.flat()}
	bar := newChecksumProgress(opts.IO, cside.in.dumps, opts.Requests, "checksum consumer")
	copts.Progress = bar.Callback()
	crecs, err := cside.in.allRecords(ctx, copts)
	bar.Finish()
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	cons, err := checksum.Merge(crecs)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if len(opts.Requests) > 0 {
		if err := cons.Select(opts.Requests); err != nil {
			return usageErrorf("consumer: %v", err)
		}
	}

	var prod *checksum.Checks
	switch {
	case pside.bare != nil:
		if len(cons.Requests) != 1 {
			return usageErrorf("producer %q is one request's payload: name the consumer request it is for with --request (the consumer holds %d requests)", shortArg(opts.Producer), len(cons.Requests))
		}
		pside.bare.ID = cons.Requests[0].PairID()
		prod = checksum.ProducerChecks(pside.bare)
	case pside.payload:
		prod = checksum.ProducerChecks(pside.byID...)
	default:
		var ids []string
		for _, r := range cons.Requests {
			if !slices.Contains(ids, r.PairID()) {
				ids = append(ids, r.PairID())
			}
		}
		bar := newChecksumProgress(opts.IO, pside.in.dumps, ids, "checksum producer")
		precs, err := pside.in.allRecords(ctx, checksum.Options{Engine: opts.Engine, Requests: ids, Progress: bar.Callback()})
		bar.Finish()
		if err != nil {
			return fmt.Errorf("producer: %w", err)
		}
		if prod, err = checksum.Merge(precs); err != nil {
			return fmt.Errorf("producer: %w", err)
		}
	}

	res := checksum.DiffWith(prod, cons, checksum.DiffOptions{Strict: opts.Strict})
	if cside.in != nil {
		checksum.RefineFlatHints(res, prod, cside.in.dumps)
	}
	for _, rv := range res.Requests {
		note, ok := pside.notes[rv.ProducerID]
		if !ok && pside.bare != nil {
			note, ok = pside.notes[""]
		}
		if ok {
			rv.Notes = append(rv.Notes, "the producer's payload: "+note)
		}
	}
	if !opts.NoDrill && res.Verdict == checksum.Mismatch && pside.dumpsOnly() && cside.dumpsOnly() {
		done := longStep(opts.IO, "drilling the mismatches down to layers, heads and tokens")
		err := drill.Explain(ctx, pside.in.dumps, cside.in.dumps, res, drill.Options{MaxDetails: opts.MaxDetails})
		done()
		if err != nil {
			return err
		}
	}
	if opts.AuditTail || opts.Stored {
		return diffAudits(ctx, opts, res, cside)
	}
	err = report.RenderDiff(opts.IO.Out, res, report.Format(opts.Output), report.DiffOptions{
		Style: tableStyle(opts.IO), AllowUnverified: opts.AllowUnverified,
	})
	if err != nil {
		return err
	}
	if err := writeDiffJUnit(opts, res, nil); err != nil {
		return err
	}
	allowedNotice(opts, res)
	opts.IO.verdict = string(res.Verdict)
	return diffExit(res, opts.AllowUnverified)
}

// writeDiffJUnit writes --junit FILE, if given: the comparison (and the
// audits, when a is not nil) as JUnit XML, whatever -o prints.
func writeDiffJUnit(opts *DiffOptions, res *checksum.DiffResult, a *report.Audits) error {
	if opts.JUnit == "" {
		return nil
	}
	do := report.DiffOptions{AllowUnverified: opts.AllowUnverified, Elapsed: time.Since(opts.started)}
	return report.WriteFile(opts.JUnit, func(w io.Writer) error {
		if a != nil {
			return report.RenderDiffAudits(w, res, a, report.FormatJUnit, do)
		}
		return report.RenderDiff(w, res, report.FormatJUnit, do)
	})
}

// diffExit maps a verdict to the command's result: ExitMismatch, else
// ExitUnverified unless allowed, else nil.
func diffExit(res *checksum.DiffResult, allowUnverified bool) error {
	var ids []string
	for _, r := range res.Requests {
		if r.Verdict == res.Verdict {
			ids = append(ids, r.ID)
		}
	}
	switch {
	case res.Verdict == checksum.Mismatch:
		return &ResultError{Code: ExitMismatch, Msg: "mismatch: request " + strings.Join(ids, ", ")}
	case res.Verdict == checksum.Unverified && !allowUnverified:
		if len(ids) == 0 {
			return &ResultError{Code: ExitUnverified, Msg: "unverified: the consumer holds no request"}
		}
		return &ResultError{Code: ExitUnverified, Msg: "unverified: request " + strings.Join(ids, ", ") + " (--allow-unverified accepts unverified loads)"}
	}
	return nil
}

// maxPayloadFile bounds a payload or kv_transfer_params file read whole
// (a 128k-token prompt's payload is about 87 KB of base64 per group).
const maxPayloadFile = layout.MaxPayloadSize

// readDiffSide resolves one side argument: "-" (payload text or JSON on
// stdin), a dump or directory (dumps and records), a record file, a
// payload file, or, when arg is not an existing path, payload text.
func readDiffSide(arg string, stdin io.Reader) (*diffSide, error) {
	if arg == "-" {
		data, err := readPayloadInput(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return payloadSide("stdin", data)
	}
	st, err := os.Stat(arg)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !looksLikePath(arg) {
			return payloadSide("the argument", []byte(arg))
		}
		return nil, err
	}
	if st.IsDir() || strings.HasSuffix(arg, ".safetensors") {
		in, err := openSide([]string{arg}, true)
		if err != nil {
			return nil, err
		}
		if len(in.rest) > 0 {
			in.Close()
			return nil, fmt.Errorf("%q is neither a dump nor a record (a payload is given as a file of its own)", in.rest[0])
		}
		return &diffSide{in: in}, nil
	}
	data, err := readPayloadFile(arg)
	if err != nil {
		return nil, err
	}
	if looksLikeRecord(data) {
		recs, err := checksum.ParseRecords(arg, data)
		if err != nil {
			return nil, err
		}
		return &diffSide{in: &sideInput{records: recs}}, nil
	}
	return payloadSide(fmt.Sprintf("%q", arg), data)
}

// looksLikePath says whether an argument that does not exist was meant as
// a path rather than payload text. Payload text is at least 8 characters
// of the base64 alphabets (standard or URL-safe, so that the decoder can
// say what is wrong with it) and, if it has a "/", no existing directory
// before it.
func looksLikePath(arg string) bool {
	t := strings.TrimSpace(arg)
	if len(t) < 8 || strings.Trim(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_") != "" {
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

// payloadSide reads a producer given as what it sent: a JSON object (with
// "kv_checksums", or a map of request id to payload), base64 text, or raw
// msgpack bytes. A payload that does not decode is not an error: its
// request is unverified (the producer's checksums are invalid) and the
// decoding error becomes a note. what names the input for errors.
func payloadSide(what string, data []byte) (*diffSide, error) {
	s := &diffSide{payload: true, notes: map[string]string{}}
	text := bytes.TrimSpace(data)
	bare := func(text string) {
		rc, err := checksum.PayloadRequestBase64("", text)
		if err != nil {
			s.notes[""] = err.Error()
		}
		s.bare = rc
	}
	// bareInPlace decodes data itself (an aligned buffer this side owns),
	// so a payload file costs about its size once (SPEC 8).
	bareInPlace := func(text bool) {
		rc, err := checksum.PayloadRequestInPlace("", data, text)
		if err != nil {
			s.notes[""] = err.Error()
		}
		s.bare = rc
	}
	switch {
	case len(text) > 0 && text[0] == '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(text, &obj); err != nil {
			return nil, fmt.Errorf("%s: not a JSON object: %v", what, err)
		}
		var format string
		if json.Unmarshal(obj["format"], &format) == nil && strings.HasPrefix(format, "kvaudit-") {
			return nil, fmt.Errorf("%s is %s output, not what a producer sends: give its dumps, records (checksum --partial -o record) or payloads (checksum -o payload)", what, format)
		}
		if raw, ok := obj["kv_checksums"]; ok {
			// vLLM's kv_transfer_params.
			var t *string
			switch err := json.Unmarshal(raw, &t); {
			case err != nil:
				s.bare = checksum.InvalidRequest("", checksum.ReasonInvalidChecksums)
				s.notes[""] = fmt.Sprintf("kv_checksums is not a string: %s", shortArg(string(raw)))
			case t == nil:
				s.bare = checksum.InvalidRequest("", checksum.ReasonNoChecksums)
			default:
				bare(*t)
			}
			return s, nil
		}
		texts := map[string]string{}
		for id, raw := range obj {
			var t string
			if err := json.Unmarshal(raw, &t); err != nil {
				// kv_transfer_params without kv_checksums.
				s.bare = checksum.InvalidRequest("", checksum.ReasonNoChecksums)
				return s, nil
			}
			texts[id] = t
		}
		// The map checksum -o payload prints: request id -> payload.
		ids := make([]string, 0, len(texts))
		for id := range texts {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			rc, err := checksum.PayloadRequestBase64(id, texts[id])
			if err != nil {
				s.notes[id] = err.Error()
			}
			s.byID = append(s.byID, rc)
		}
	case isText(text):
		bareInPlace(true)
	default:
		// Raw msgpack, as a file.
		bareInPlace(false)
	}
	return s, nil
}

// readPayloadFile reads a regular payload or record file (never a FIFO or
// a device; at most maxPayloadFile bytes, its size when opened) into an
// aligned buffer that in-place decoding can keep (checksum.NewPayloadBuffer).
func readPayloadFile(path string) ([]byte, error) {
	f, st, err := layout.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > maxPayloadFile {
		return nil, fmt.Errorf("%q: %d bytes is more than the %d-byte limit for a payload or record file", path, st.Size(), maxPayloadFile)
	}
	buf := checksum.NewPayloadBuffer(int(st.Size()))
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	return buf[:n], nil
}

// readPayloadInput reads stdin, at most maxPayloadFile bytes, into an
// aligned buffer: in chunks, then once into a buffer of the exact size.
func readPayloadInput(r io.Reader) ([]byte, error) {
	if f, ok := r.(*os.File); ok {
		// Redirected from a file: read it at its size, once.
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			if st.Size() > maxPayloadFile {
				return nil, fmt.Errorf("%d bytes: too large for a payload", st.Size())
			}
			if off, err := f.Seek(0, io.SeekCurrent); err == nil && off <= st.Size() {
				buf := checksum.NewPayloadBuffer(int(st.Size() - off))
				n, err := io.ReadFull(f, buf)
				if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
					return nil, err
				}
				return buf[:n], nil
			}
		}
	}
	var chunks [][]byte
	total := 0
	for total <= maxPayloadFile {
		c := make([]byte, 1<<20)
		n, err := io.ReadFull(r, c)
		if n > 0 {
			chunks = append(chunks, c[:n])
			total += n
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if total > maxPayloadFile {
		return nil, fmt.Errorf("more than %d bytes: too large for a payload", maxPayloadFile)
	}
	buf := checksum.NewPayloadBuffer(total)
	off := 0
	for i, c := range chunks {
		off += copy(buf[off:], c)
		chunks[i] = nil // let the chunk go
	}
	return buf, nil
}

// isText says whether b is printable ASCII (base64 text, maybe broken).
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c >= 0x7f {
			return false
		}
	}
	return true
}
