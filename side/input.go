package side

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/internal/mapped"
	"github.com/kvaudit/kvaudit/layout"
	"github.com/kvaudit/kvaudit/wire"
)

// Input names one side of a comparison. Set exactly one of Payload, Arg
// and Paths.
type Input struct {
	// Payload is what a producer sent, already read: base64 text, a JSON
	// object with a "kv_checksums" key (vLLM's kv_transfer_params), the
	// JSON map of request id to payload that checksum -o payload prints,
	// or raw msgpack bytes. Name names it in messages ("the payload" when
	// empty).
	Payload []byte
	Name    string
	// Arg is the side as one command-line argument: "-" (a payload read
	// from Stdin), a dump, a directory of dumps and/or records, a record
	// file, a payload file, or, when it names nothing on disk, payload
	// text: a JSON object, base64 text that starts as a payload does, or
	// any text that cannot be a file name (too long, a NUL byte), however
	// long.
	Arg   string
	Stdin io.Reader
	// Paths are dumps, directories holding dumps and/or records, and
	// record files: the ranks of one side.
	Paths []string
}

// Source is one side opened: what its checks come from, dumps (mapped;
// Close releases them) and records, or what a producer sent (payloads,
// which Compare reads).
type Source struct {
	Dumps   []*layout.Dump
	Records []*wire.Record
	// recordFiles are the files Records were read from.
	recordFiles []string

	// A producer given as what it sent: one bare payload (it pairs with
	// one consumer request) or payloads by producer request id.
	payload bool
	bare    *RequestChecks
	byID    []*RequestChecks
	// notes say why payloads were not decoded, by producer request id
	// ("" for a bare payload).
	notes map[string]string
	name  string
	// files are the files the side was read from (dumps, records,
	// payload files), to tell when two sides are one.
	files []string
	// remoteID is the remote_request_id of vLLM's kv_transfer_params
	// given as the producer (the producer's request id), "" when none.
	remoteID string
}

// Close releases the side's dumps.
func (s *Source) Close() { layout.CloseAll(s.Dumps) }

// IsPayload says whether the side is what a producer sent (payloads),
// not dumps or records.
func (s *Source) IsPayload() bool { return s.payload }

// Bare is the side's one bare payload (it pairs with one consumer
// request), nil when the side is not one.
func (s *Source) Bare() *RequestChecks { return s.bare }

// ByID are the side's payloads by producer request id, in id order.
func (s *Source) ByID() []*RequestChecks { return s.byID }

// Notes say why payloads were not decoded, by producer request id ("" for
// a bare payload); the caller does not change the map.
func (s *Source) Notes() map[string]string { return s.notes }

// Name names the side in messages ("the side", "stdin", a quoted path or
// argument).
func (s *Source) Name() string { return s.name }

// Files are the files the side was read from (dumps, records, payload
// files), to tell when two sides are one.
func (s *Source) Files() []string { return s.files }

// RemoteID is the remote_request_id of vLLM's kv_transfer_params given
// as the producer (the producer's request id), "" when none.
func (s *Source) RemoteID() string { return s.remoteID }

// Flat says whether the side holds a flat payload (block-numbered values,
// vLLM's published form).
func (s *Source) Flat() bool {
	for _, r := range append([]*RequestChecks{s.bare}, s.byID...) {
		if r != nil && slices.ContainsFunc(r.Groups, func(g *GroupChecks) bool { return g.FlatOnly }) {
			return true
		}
	}
	return false
}

// DumpsOnly says whether the side is all dumps (so the drill-down and the
// audits can read its cells).
func (s *Source) DumpsOnly() bool {
	return !s.payload && len(s.Records) == 0 && len(s.Dumps) > 0
}

// AllRecords checksums the side's dumps and returns those records with
// the side's own, ready for Merge.
func (s *Source) AllRecords(ctx context.Context, opts checksum.Options) ([]*wire.Record, error) {
	if s.payload {
		return nil, fmt.Errorf("%s is a payload, not dumps or records", s.name)
	}
	recs, err := checksum.Records(ctx, s.Dumps, opts)
	if err != nil {
		return nil, err
	}
	return append(recs, s.Records...), nil
}

// maxRecordFile bounds a record file (`checksum -o record`), and
// maxPayloadFile a payload or kv_transfer_params file read whole (a
// 128k-token prompt's payload is about 87 KB of base64 per group), or
// payloads on stdin.
const (
	maxRecordFile  = 1 << 30
	maxPayloadFile = 1 << 30
)

// Open opens a side: the one way from paths, an argument or payload bytes
// to dumps, records or payloads, and the one place that decides what an
// argument is (see Input.Arg). The caller closes the source. A side path
// that does not exist is a *layout.NotFoundError, a directory whose
// subdirectories hold the dumps a *layout.NoDumpError, an argument that is
// neither a path nor payload text a *NotPayloadError.
func Open(in Input) (*Source, error) {
	set := 0
	for _, b := range []bool{in.Payload != nil, in.Arg != "", len(in.Paths) > 0} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, errors.New("an input names a side by exactly one of Payload, Arg and Paths")
	}
	switch {
	case in.Payload != nil:
		name := in.Name
		if name == "" {
			name = "the payload"
		}
		return payloadSide(name, in.Payload)
	case in.Arg != "":
		return openArg(in.Arg, in.Stdin)
	}
	return openPaths(in.Paths)
}

// openPaths opens the dumps and reads the records among paths (files,
// dump directories, or directories holding either).
func openPaths(paths []string) (*Source, error) {
	dumpPaths, rest, err := layout.FindDumps(paths)
	if err != nil {
		return nil, err
	}
	s := &Source{name: "the side"}
	for _, p := range rest {
		// Regular files only (a FIFO or /dev/zero is refused at once), at
		// most maxRecordFile bytes.
		data, err := mapped.ReadRegularFile(p, maxRecordFile, "record")
		if err != nil {
			return nil, err
		}
		if !looksLikeRecord(data) {
			return nil, fmt.Errorf("%q is neither a dump nor a record (a payload is given as a side of its own)", p)
		}
		recs, err := parseRecordFile(p, data)
		if err != nil {
			return nil, err
		}
		s.Records = append(s.Records, recs...)
		s.recordFiles = append(s.recordFiles, p)
	}
	if s.Dumps, err = layout.OpenSide(dumpPaths); err != nil {
		return nil, err
	}
	s.files = append(append(s.files, dumpPaths...), rest...)
	return s, nil
}

// bigRecordFile is the size past which parseRecordFile lets go of the
// bytes a record file was read into at once.
const bigRecordFile = 16 << 20

// parseRecordFile parses a record file read whole (wire.ParseRecords).
// Past bigRecordFile bytes it then collects the garbage, the file's bytes
// among it (the caller holds them no longer), before anything else is read
// or allocated: a side of large records holds each once, as its values
// (about the file's size at most), never the bytes of one beside the
// values of the next. Records hold pointer-free arrays, so the collection
// costs little.
func parseRecordFile(path string, data []byte) ([]*wire.Record, error) {
	big := len(data) > bigRecordFile
	recs, err := wire.ParseRecords(path, data)
	if big {
		runtime.GC()
	}
	return recs, err
}

// looksLikeRecord says whether a file means to be a record (and so must be
// a valid one).
func looksLikeRecord(data []byte) bool {
	return bytes.Contains(data, []byte(wire.RecordFormat))
}

// payloadSide reads a producer given as what it sent: a JSON object (with
// "kv_checksums", or a map of request id to payload), base64 text, or raw
// msgpack bytes. A payload that does not decode is not an error: its
// request is unverified (the producer's checksums are invalid) and the
// decoding error becomes a note. what names the input for errors.
func payloadSide(what string, data []byte) (*Source, error) {
	s := &Source{payload: true, notes: map[string]string{}, name: what}
	text := bytes.TrimSpace(data)
	bare := func(text string) {
		rc, err := PayloadRequestBase64("", text)
		if err != nil {
			s.notes[""] = err.Error()
		}
		s.bare = rc
	}
	// bareInPlace decodes data itself (an aligned buffer this side owns),
	// so a payload file costs about its size once (docs/spec.md §8).
	bareInPlace := func(text bool) {
		rc, err := payloadRequestInPlace("", data, text)
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
			return nil, fmt.Errorf("%s is %s output, not what a producer sends: give its dumps, records or payloads", what, format)
		}
		// A key given twice: the last one counts, in encoding/json as in
		// Python's json.loads (what vLLM's consumer reads it with).
		repeated := repeatedKeys(text)
		if raw, ok := obj["kv_checksums"]; ok {
			// vLLM's kv_transfer_params; its remote_request_id (a
			// consumer's) names the producer request.
			_ = json.Unmarshal(obj["remote_request_id"], &s.remoteID)
			var t *string
			switch err := json.Unmarshal(raw, &t); {
			case err != nil:
				s.bare = invalidRequest("", ReasonInvalidChecksums)
				s.notes[""] = fmt.Sprintf("kv_checksums is not a string: %s", shortArg(string(raw)))
			case t == nil:
				s.bare = invalidRequest("", ReasonNoChecksums)
			default:
				bare(*t)
			}
			if n := repeated["kv_checksums"]; n > 1 {
				s.bare.Notes = append(s.bare.Notes, repeatedNote("kv_checksums", n))
			}
			return s, nil
		}
		texts := map[string]string{}
		for id, raw := range obj {
			var t string
			if err := json.Unmarshal(raw, &t); err != nil {
				// kv_transfer_params without kv_checksums.
				s.bare = invalidRequest("", ReasonNoChecksums)
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
			rc, err := PayloadRequestBase64(id, texts[id])
			if err != nil {
				s.notes[id] = err.Error()
			}
			if n := repeated[id]; n > 1 {
				rc.Notes = append(rc.Notes, repeatedNote(id, n))
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

// repeatedNote says which of a key's n values a JSON object's reader
// took.
func repeatedNote(key string, n int) string {
	return fmt.Sprintf("the key %q appears %d times in the producer's JSON object: the last one is used, as Python's json.loads (vLLM's consumer) does", key, n)
}

// repeatedKeys returns the keys that the top level of a JSON object (valid
// JSON: json.Unmarshal took it) holds more than once, with their counts,
// each as encoding/json decodes it (a byte of invalid UTF-8 as U+FFFD). It
// reads the text through internal/jsonscan, skipping the values.
func repeatedKeys(text []byte) map[string]int {
	if !utf8.Valid(text) {
		text = replaceInvalidUTF8(text)
	}
	counts := map[string]int{}
	// No limit but encoding/json's own: its nesting depth, the length of
	// the text.
	sc := jsonscan.New(text, jsonscan.Options{MaxDepth: 10000, MaxNumber: len(text), LoneSurrogates: true})
	if k, err := sc.Next(); err != nil || k != jsonscan.ObjectStart {
		return counts
	}
	for {
		k, err := sc.Next()
		if err != nil || k == jsonscan.ObjectEnd {
			break
		}
		if sc.IsKey() {
			counts[string(sc.Bytes())]++
		} else if sc.Skip(k) != nil {
			break
		}
	}
	for k, n := range counts {
		if n < 2 {
			delete(counts, k)
		}
	}
	return counts
}

// replaceInvalidUTF8 returns text with each byte that starts no valid rune
// replaced by U+FFFD, as encoding/json decodes a string.
func replaceInvalidUTF8(text []byte) []byte {
	out := make([]byte, 0, len(text)+16)
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRune(text[i:])
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, text[i:i+n]...)
		}
		i += n
	}
	return out
}

// readPayloadFile reads a regular payload or record file (never a FIFO or
// a device; at most maxPayloadFile bytes, its size when opened) into an
// aligned buffer that in-place decoding can keep (wire.NewPayloadBuffer).
func readPayloadFile(path string) ([]byte, error) {
	f, st, err := mapped.OpenRegular(nil, path, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > maxPayloadFile {
		return nil, fmt.Errorf("%q: %d bytes is more than the %d-byte limit for a payload or record file", path, st.Size(), maxPayloadFile)
	}
	buf := wire.NewPayloadBuffer(int(st.Size()))
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
				buf := wire.NewPayloadBuffer(int(st.Size() - off))
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
	buf := wire.NewPayloadBuffer(total)
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
