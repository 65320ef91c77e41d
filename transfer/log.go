package transfer

import (
	"bufio"
	"fmt"
	"github.com/kvaudit/kvaudit/parse"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/kvaudit/kvaudit/layout"
)

// LogFormat is the format of a NIXL descriptor log (docs/spec.md §13).
const LogFormat = "kvaudit-nixl-log/1"

// Bounds on what one record of a log may hold: a string value (an agent
// name, a notification, a request id) and the elements of one array
// (descriptors, indices). Longer values are refused, so a hostile log
// cannot make the reader hold more than this per record.
const (
	MaxString = 1 << 16
	MaxArray  = 1 << 24
)

// LocalAgent names the local agent in a dlist record, besides "": what
// vLLM passes prep_xfer_dlist for local descriptors.
const LocalAgent = "NIXL_INIT_AGENT"

// Desc is one NIXL descriptor: a device address, a length in bytes and a
// device id.
type Desc struct {
	Addr, Len uint64
	Dev       uint32
}

// Header is a log's first line: the agent whose calls it records and its
// rank, and optionally the producer's lease on a request's blocks (as
// the recording process saw it), the engine id and when the recorder
// started.
type Header struct {
	Agent  string
	TPRank int
	PPRank int
	// LeaseS is the lease in seconds (HasLease: the header gives one).
	LeaseS   int
	HasLease bool
	EngineID string
	Time     Stamp
}

// Stamp is when a recorded call returned: time.monotonic_ns() and
// time.time_ns() of the recording process (Ok: the record has both).
type Stamp struct {
	Mono, Wall int64
	Ok         bool
}

// Op is a record's kind.
type Op uint8

// Record kinds, the "op" of each line after the header.
const (
	OpRegister    Op = iota + 1 // register_memory
	OpDList                     // prep_xfer_dlist
	OpXfer                      // make_prepped_xfer or initialize_xfer
	OpState                     // a transfer's final state
	OpPost                      // transfer(handle): a transfer posted
	OpNotif                     // send_notif
	OpNotifs                    // get_new_notifs returning at least one
	OpRemoteDone                // check_remote_xfer_done returned True
	OpError                     // a recorded call raised
	OpDeregister                // deregister_memory
	OpRemoveAgent               // remove_remote_agent
	OpMemView                   // prep_mem_view
)

var opNames = map[string]Op{"register": OpRegister, "dlist": OpDList, "xfer": OpXfer, "state": OpState,
	"post": OpPost, "notif": OpNotif, "notifs": OpNotifs, "remote_done": OpRemoteDone, "error": OpError,
	"deregister": OpDeregister, "remove_agent": OpRemoveAgent, "mem_view": OpMemView}

// opList names the ops for an error, in the order of docs/spec.md §13.
const opList = "register, dlist, xfer, state, post, notif, notifs, remote_done, error, deregister, remove_agent or mem_view"

func (o Op) String() string {
	for k, v := range opNames {
		if v == o {
			return k
		}
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Transfer kinds and states.
const (
	Read  = "READ"
	Write = "WRITE"
	Done  = "DONE"
	Err   = "ERR"
)

// Record is one line of a log after the header. Which fields hold depends
// on Op; Next reuses the slices of the record it fills.
type Record struct {
	Op   Op
	Line int
	// Mem and Descs: register and dlist (Mem: register only).
	Mem   string
	Descs []Desc
	// Handle and Agent: dlist ("" or LocalAgent for local descriptors).
	Handle int
	Agent  string
	// ID: xfer and state.
	ID int
	// Kind, Prepped and the rest: xfer. A prepared transfer
	// (make_prepped_xfer) names its lists by Local and Remote (0 when
	// the recorder did not know the handle) and indices into them; an
	// initialized one (initialize_xfer) gives LocalDescs, RemoteDescs
	// and RemoteAgent.
	Kind                    string
	Prepped                 bool
	Local, Remote           int
	LocalIDs, RemoteIDs     []int
	LocalDescs, RemoteDescs []Desc
	RemoteAgent             string
	Notif                   string
	// Request is the local request the transfer serves, when the
	// recorder knew it (HasRequest).
	Request    string
	HasRequest bool
	// State: DONE or ERR.
	State string
	// Msg: notif, remote_done and error (Agent: notif and remote_done,
	// the peer; remove_agent, the agent removed). Call: error, the call
	// that raised; HasID: an error's id is a transfer's (not null).
	Msg    string
	Call   string
	HasID  bool
	Notifs []Notif
	// Time: when the call returned, if the recorder said (t_mono_ns,
	// t_wall_ns).
	Time Stamp
}

// Notif is one notification get_new_notifs returned: from Agent, Msg.
type Notif struct{ Agent, Msg string }

// Reader streams a log's records: it holds one record at a time, and
// reads its arrays element by element, never a whole line.
type Reader struct {
	r      *bufio.Reader
	name   string
	line   int
	header Header
	eof    bool
	sink   func(Op, Desc)
	// mono is the last t_mono_ns read (hasMono: one was), which the next
	// may not precede.
	mono    int64
	hasMono bool
	// keys are the keys of the line being read, sb a string's bytes
	// (both reused).
	keys keySet
	sb   []byte
}

// keySet is the keys of one line's object: a few, so a slice.
type keySet []string

func (k keySet) has(key string) bool {
	for _, v := range k {
		if v == key {
			return true
		}
	}
	return false
}

// NewReader reads a log's header from r; name names the log in errors.
// On error it returns nil and a *parse.Error (parse.NIXLLog) (or the reader's error).
func NewReader(r io.Reader, name string) (*Reader, error) {
	lr := &Reader{r: bufio.NewReaderSize(r, 1<<16), name: name, line: 1}
	if err := lr.readHeader(); err != nil {
		return nil, err
	}
	return lr, nil
}

// Header returns the log's header.
func (r *Reader) Header() Header { return r.header }

// errf is a *parse.Error (parse.NIXLLog) at the current line.
func (r *Reader) errf(field, format string, args ...any) error {
	return &parse.Error{Format: parse.NIXLLog, File: r.name, Line: r.line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// byteAt reads one byte; end of input inside a line is an error.
func (r *Reader) byteAt(field string) (byte, error) {
	c, err := r.r.ReadByte()
	if err == io.EOF {
		return 0, r.errf(field, "the line ends early (a truncated log?)")
	}
	if err != nil {
		return 0, err
	}
	if c == '\n' {
		return 0, r.errf(field, "the line ends early")
	}
	return c, nil
}

// ws skips JSON whitespace within a line and returns the next byte.
func (r *Reader) ws(field string) (byte, error) {
	for {
		c, err := r.byteAt(field)
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\r' {
			return c, nil
		}
	}
}

func (r *Reader) expect(want byte, field string) error {
	c, err := r.ws(field)
	if err != nil {
		return err
	}
	if c != want {
		return r.errf(field, "want %q, got %q", want, c)
	}
	return nil
}

// str reads a JSON string (after whitespace), at most MaxString bytes.
func (r *Reader) str(field string) (string, error) {
	if err := r.expect('"', field); err != nil {
		return "", err
	}
	return r.strBody(field)
}

// strBody reads the rest of a JSON string after its opening quote.
func (r *Reader) strBody(field string) (string, error) {
	b, err := r.strBytes(field)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// knownKeys are the keys of the format, returned without a copy.
var knownKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"format", "agent", "tp_rank", "pp_rank", "lease_s", "engine_id", "t_mono_ns", "t_wall_ns",
		"op", "mem", "descs", "handle", "id", "kind", "local", "local_ids", "remote", "remote_ids", "local_descs",
		"remote_descs", "remote_agent", "notif", "request", "state", "msg", "notifs", "call"} {
		m[k] = k
	}
	return m
}()

// keyStr reads an object's key (after whitespace).
func (r *Reader) keyStr() (string, error) {
	if err := r.expect('"', ""); err != nil {
		return "", err
	}
	b, err := r.strBytes("")
	if err != nil {
		return "", err
	}
	if k, ok := knownKeys[string(b)]; ok {
		return k, nil
	}
	return string(b), nil
}

// strBytes reads the rest of a JSON string after its opening quote into
// the reader's buffer (valid until the next read).
func (r *Reader) strBytes(field string) ([]byte, error) {
	b := r.sb[:0]
	defer func() { r.sb = b[:0] }()
	for {
		c, err := r.byteAt(field)
		if err != nil {
			return nil, err
		}
		switch {
		case c == '"':
			if !utf8.Valid(b) {
				return nil, r.errf(field, "a string that is not valid UTF-8")
			}
			return b, nil
		case c < 0x20:
			return nil, r.errf(field, "a control character (0x%02x) inside a string", c)
		case c == '\\':
			e, err := r.byteAt(field)
			if err != nil {
				return nil, err
			}
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				v, err := r.hex4(field)
				if err != nil {
					return nil, err
				}
				ch := rune(v)
				if utf16.IsSurrogate(ch) {
					// A pair, or a lone surrogate (as Python writes one).
					if p, _ := r.r.Peek(2); len(p) == 2 && p[0] == '\\' && p[1] == 'u' {
						r.r.Discard(2)
						lo, err := r.hex4(field)
						if err != nil {
							return nil, err
						}
						if d := utf16.DecodeRune(ch, rune(lo)); d != utf8.RuneError {
							b = utf8.AppendRune(b, d)
							break
						}
						b = utf8.AppendRune(b, utf8.RuneError)
						ch = rune(lo)
						if utf16.IsSurrogate(ch) {
							ch = utf8.RuneError
						}
					} else {
						ch = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, ch)
			default:
				return nil, r.errf(field, "unknown escape \\%c in a string", e)
			}
		default:
			b = append(b, c)
		}
		if len(b) > MaxString {
			return nil, r.errf(field, "a string longer than %d bytes", MaxString)
		}
	}
}

func (r *Reader) hex4(field string) (uint16, error) {
	var v uint16
	for range 4 {
		c, err := r.byteAt(field)
		if err != nil {
			return 0, err
		}
		d, ok := hexDigit(c)
		if !ok {
			return 0, r.errf(field, "a \\u escape with %q, not 4 hex digits", c)
		}
		v = v<<4 | uint16(d)
	}
	return v, nil
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// uint reads a JSON non-negative integer (no fraction, exponent or
// leading zero) of at most max; first is its first byte, already read.
func (r *Reader) uintFrom(first byte, field string, max uint64) (uint64, error) {
	if first == '-' {
		return 0, r.errf(field, "a negative number")
	}
	if first < '0' || first > '9' {
		return 0, r.errf(field, "want a number, got %q", first)
	}
	v := uint64(first - '0')
	for {
		p, err := r.r.Peek(1)
		if err != nil || len(p) == 0 {
			break
		}
		c := p[0]
		if c == '.' || c == 'e' || c == 'E' {
			return 0, r.errf(field, "a number with a fraction or an exponent: want an integer")
		}
		if c < '0' || c > '9' {
			break
		}
		if first == '0' {
			return 0, r.errf(field, "a number with a leading zero")
		}
		r.r.Discard(1)
		if v > (max-uint64(c-'0'))/10 {
			return 0, r.errf(field, "a number larger than %d", max)
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
}

func (r *Reader) int(field string, max uint64) (int, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	v, err := r.uintFrom(c, field, max)
	return int(v), err
}

// handle reads a handle number or null (0).
func (r *Reader) handle(field string) (int, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	if c == 'n' {
		for _, want := range []byte("ull") {
			c, err := r.byteAt(field)
			if err != nil {
				return 0, err
			}
			if c != want {
				return 0, r.errf(field, "want a handle number or null")
			}
		}
		return 0, nil
	}
	v, err := r.uintFrom(c, field, 1<<62)
	if err == nil && v == 0 {
		return 0, r.errf(field, "handle 0: handles are numbered from 1")
	}
	return int(v), err
}

// array reads a JSON array, calling elem for each element (after the
// reader has skipped whitespace up to it); at most MaxArray elements.
func (r *Reader) array(field string, elem func(i int, first byte) error) error {
	if err := r.expect('[', field); err != nil {
		return err
	}
	c, err := r.ws(field)
	if err != nil {
		return err
	}
	if c == ']' {
		return nil
	}
	for i := 0; ; i++ {
		if i >= MaxArray {
			return r.errf(field, "more than %d elements", MaxArray)
		}
		if err := elem(i, c); err != nil {
			return err
		}
		c, err = r.ws(field)
		if err != nil {
			return err
		}
		switch c {
		case ']':
			return nil
		case ',':
			if c, err = r.ws(field); err != nil {
				return err
			}
		default:
			return r.errf(field, "want ',' or ']' after element %d, got %q", i, c)
		}
	}
}

// descs reads an array of [ADDR, LEN, DEV] descriptors, handing each to
// add. Its elements' field names are built only for an error.
func (r *Reader) descs(field string, add func(Desc)) error {
	return r.array(field, func(i int, first byte) error {
		err := r.desc(first, add)
		if le := parse.As(err, parse.NIXLLog); le != nil {
			le.Field = field + fmt.Sprintf("[%d]", i) + strings.TrimPrefix(le.Field, "[]")
		}
		return err
	})
}

// desc reads one descriptor; errors name its field "[]..." (descs fills
// in the index).
func (r *Reader) desc(first byte, add func(Desc)) error {
	if first != '[' {
		return r.errf("[]", "want a descriptor [ADDR, LEN, DEV], got %q", first)
	}
	addr, s, err := r.hexAddr("[][0]")
	if err != nil {
		return err
	}
	if err := r.expect(',', "[]"); err != nil {
		return err
	}
	n, err := r.int("[][1]", 1<<62)
	if err != nil {
		return err
	}
	if err := r.expect(',', "[]"); err != nil {
		return err
	}
	dev, err := r.int("[][2]", 1<<31)
	if err != nil {
		return err
	}
	if err := r.expect(']', "[]"); err != nil {
		return err
	}
	if uint64(n) > ^uint64(0)-addr {
		if s == "" {
			s = "0x" + strconv.FormatUint(addr, 16)
		}
		return r.errf("[]", "address %q and length %d pass the end of the address space", s, n)
	}
	add(Desc{Addr: addr, Len: uint64(n), Dev: uint32(dev)})
	return nil
}

// hexAddr reads an address string: "0x" and 1 to 16 hex digits, on a fast
// path when the bytes are there; otherwise as a string, for the error to
// quote it (s, "" on the fast path).
func (r *Reader) hexAddr(field string) (addr uint64, s string, err error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, "", err
	}
	if c == '"' {
		if p, _ := r.r.Peek(19); len(p) >= 4 && p[0] == '0' && p[1] == 'x' {
			var v uint64
			for i := 2; i < len(p) && i < 19; i++ {
				if p[i] == '"' && i > 2 {
					r.r.Discard(i + 1)
					return v, "", nil
				}
				d, ok := hexDigit(p[i])
				if !ok || i == 18 {
					break
				}
				v = v<<4 | uint64(d)
			}
		}
	} else {
		return 0, "", r.errf(field, "want '\"', got %q", c)
	}
	if s, err = r.strBody(field); err != nil {
		return 0, "", err
	}
	if addr, err = layout.ParseHex64(s); err != nil {
		return 0, "", r.errf(field, "address %v", err)
	}
	return addr, s, nil
}

// ids reads an array of indices into dst.
func (r *Reader) ids(field string, dst []int) ([]int, error) {
	dst = dst[:0]
	err := r.array(field, func(i int, first byte) error {
		v, err := r.uintFrom(first, field+"[]", MaxArray*64)
		if le := parse.As(err, parse.NIXLLog); le != nil {
			le.Field = fmt.Sprintf("%s[%d]", field, i)
		}
		dst = append(dst, int(v))
		return err
	})
	return dst, err
}

// object reads a line's object: each key (the first must be first) is
// read and handed to value, which reads its value; a key twice is an
// error. After the object comes the end of the line or of the input.
func (r *Reader) object(first string, value func(key string) error) error {
	if err := r.expect('{', ""); err != nil {
		return err
	}
	r.keys = r.keys[:0]
	for i := 0; ; i++ {
		key, err := r.keyStr()
		if err != nil {
			return err
		}
		if i == 0 && key != first {
			return r.errf(key, "the first key is %q, want %q", key, first)
		}
		if r.keys.has(key) {
			return r.errf(key, "the key appears twice")
		}
		r.keys = append(r.keys, key)
		if err := r.expect(':', key); err != nil {
			return err
		}
		if err := value(key); err != nil {
			return err
		}
		c, err := r.ws(key)
		if err != nil {
			return err
		}
		if c == '}' {
			break
		}
		if c != ',' {
			return r.errf(key, "want ',' or '}' after the value, got %q", c)
		}
	}
	for {
		c, err := r.r.ReadByte()
		if err == io.EOF {
			r.eof = true
			return nil
		}
		if err != nil {
			return err
		}
		switch c {
		case '\n':
			return nil
		case ' ', '\t', '\r':
			continue
		}
		return r.errf("", "%q after the line's object (one object per line)", c)
	}
}

func (r *Reader) readHeader() error {
	var h Header
	var format string
	got := &r.keys
	err := r.object("format", func(key string) error {
		var err error
		switch key {
		case "format":
			if format, err = r.str(key); err == nil && format != LogFormat {
				err = r.errf(key, "%q, want %q", format, LogFormat)
			}
		case "agent":
			if h.Agent, err = r.str(key); err == nil && h.Agent == "" {
				err = r.errf(key, "empty agent name")
			}
		case "tp_rank":
			h.TPRank, err = r.int(key, 1<<16)
		case "pp_rank":
			h.PPRank, err = r.int(key, 1<<16)
		case "lease_s":
			h.LeaseS, err = r.int(key, 1<<40)
			h.HasLease = true
		case "engine_id":
			h.EngineID, err = r.str(key)
		case "t_mono_ns":
			h.Time.Mono, err = r.int64(key)
		case "t_wall_ns":
			h.Time.Wall, err = r.int64(key)
		default:
			err = r.errf(key, "unknown key in the header")
		}
		return err
	})
	if err != nil {
		if le := parse.As(err, parse.NIXLLog); le != nil && le.Field == "" && le.Msg != "" && !got.has("format") {
			le.Msg = "not a " + LogFormat + " log: " + le.Msg
		}
		return err
	}
	for _, k := range []string{"agent", "tp_rank", "pp_rank"} {
		if !got.has(k) {
			return r.errf(k, "missing from the header")
		}
	}
	if err := r.stamp(&h.Time, got); err != nil {
		return err
	}
	r.header = h
	return nil
}

// int64 reads a non-negative integer that fits an int64 (a time in
// nanoseconds).
func (r *Reader) int64(field string) (int64, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	v, err := r.uintFrom(c, field, 1<<63-1)
	return int64(v), err
}

// stamp checks a record's timestamps: both or neither, and t_mono_ns not
// before the log's previous one.
func (r *Reader) stamp(t *Stamp, got *keySet) error {
	switch m, w := got.has("t_mono_ns"), got.has("t_wall_ns"); {
	case m && w:
		t.Ok = true
	case m:
		return r.errf("t_wall_ns", "missing beside t_mono_ns (a record has both timestamps or neither)")
	case w:
		return r.errf("t_mono_ns", "missing beside t_wall_ns (a record has both timestamps or neither)")
	default:
		return nil
	}
	if r.hasMono && t.Mono < r.mono {
		return r.errf("t_mono_ns", "%d is before the previous record's %d (t_mono_ns is non-decreasing in a log)", t.Mono, r.mono)
	}
	r.mono, r.hasMono = t.Mono, true
	return nil
}

// Next reads the next record into rec, reusing its slices; it returns
// io.EOF after the last. On error the record is incomplete and the
// error is a *parse.Error (parse.NIXLLog) (or the reader's).
func (r *Reader) Next(rec *Record) error {
	if r.eof {
		return io.EOF
	}
	r.line++
	if p, err := r.r.Peek(1); err == io.EOF || (err == nil && len(p) == 0) {
		return io.EOF
	}
	*rec = Record{Line: r.line, Descs: rec.Descs[:0], LocalIDs: rec.LocalIDs[:0], RemoteIDs: rec.RemoteIDs[:0],
		LocalDescs: rec.LocalDescs[:0], RemoteDescs: rec.RemoteDescs[:0], Notifs: rec.Notifs[:0]}
	got := &r.keys
	err := r.object("op", func(key string) error {
		if key == "op" {
			s, err := r.str(key)
			if err != nil {
				return err
			}
			op, ok := opNames[s]
			if !ok {
				return r.errf(key, "unknown op %q (want %s)", s, opList)
			}
			rec.Op = op
			return nil
		}
		switch key {
		case "t_mono_ns":
			var err error
			rec.Time.Mono, err = r.int64(key)
			return err
		case "t_wall_ns":
			var err error
			rec.Time.Wall, err = r.int64(key)
			return err
		}
		return r.field(rec, key)
	})
	if err != nil {
		return err
	}
	if err := r.complete(rec, got); err != nil {
		return err
	}
	return r.stamp(&rec.Time, got)
}

// SetDescSink streams the descriptors of register and dlist records to fn
// (with the record's op) instead of collecting them in Record.Descs,
// which then stays empty: a reader of huge prepared lists keeps them in a
// form of its own. nil restores Record.Descs.
func (r *Reader) SetDescSink(fn func(op Op, d Desc)) { r.sink = fn }

// addTo is where a register or dlist record's descriptors go: the sink,
// or the record.
func (r *Reader) addTo(rec *Record, dst *[]Desc) func(Desc) {
	if r.sink != nil {
		op, sink := rec.Op, r.sink
		return func(d Desc) { sink(op, d) }
	}
	return func(d Desc) { *dst = append(*dst, d) }
}

// field reads the value of key for rec's op.
func (r *Reader) field(rec *Record, key string) error {
	var err error
	unknown := func() error { return r.errf(key, "unknown key in a %s record", rec.Op) }
	switch rec.Op {
	case OpRegister:
		switch key {
		case "mem":
			rec.Mem, err = r.str(key)
		case "descs":
			err = r.descs(key, r.addTo(rec, &rec.Descs))
		default:
			return unknown()
		}
	case OpDList:
		switch key {
		case "handle":
			rec.Handle, err = r.handle(key)
			if err == nil && rec.Handle == 0 {
				err = r.errf(key, "null: a prepared list has a handle")
			}
		case "agent":
			rec.Agent, err = r.str(key)
		case "descs":
			err = r.descs(key, r.addTo(rec, &rec.Descs))
		default:
			return unknown()
		}
	case OpXfer:
		switch key {
		case "id":
			rec.ID, err = r.int(key, 1<<62)
		case "kind":
			if rec.Kind, err = r.str(key); err == nil && rec.Kind != Read && rec.Kind != Write {
				err = r.errf(key, "%q, want READ or WRITE", rec.Kind)
			}
		case "local":
			rec.Local, err = r.handle(key)
		case "remote":
			rec.Remote, err = r.handle(key)
		case "local_ids":
			rec.LocalIDs, err = r.ids(key, rec.LocalIDs)
		case "remote_ids":
			rec.RemoteIDs, err = r.ids(key, rec.RemoteIDs)
		case "local_descs":
			err = r.descs(key, func(d Desc) { rec.LocalDescs = append(rec.LocalDescs, d) })
		case "remote_descs":
			err = r.descs(key, func(d Desc) { rec.RemoteDescs = append(rec.RemoteDescs, d) })
		case "remote_agent":
			rec.RemoteAgent, err = r.str(key)
		case "notif":
			rec.Notif, err = r.str(key)
		case "request":
			rec.Request, err = r.str(key)
			rec.HasRequest = true
		default:
			return unknown()
		}
	case OpState:
		switch key {
		case "id":
			rec.ID, err = r.int(key, 1<<62)
		case "state":
			if rec.State, err = r.str(key); err == nil && rec.State != Done && rec.State != Err {
				err = r.errf(key, "%q, want DONE or ERR", rec.State)
			}
		default:
			return unknown()
		}
	case OpPost:
		switch key {
		case "id":
			rec.ID, err = r.int(key, 1<<62)
		case "notif":
			rec.Notif, err = r.str(key)
		default:
			return unknown()
		}
	case OpNotif, OpRemoteDone:
		switch key {
		case "agent":
			rec.Agent, err = r.str(key)
		case "msg":
			rec.Msg, err = r.str(key)
		default:
			return unknown()
		}
	case OpNotifs:
		if key != "notifs" {
			return unknown()
		}
		err = r.array(key, func(i int, first byte) error {
			field := fmt.Sprintf("%s[%d]", key, i)
			if first != '[' {
				return r.errf(field, "want a notification [AGENT, TEXT], got %q", first)
			}
			var n Notif
			var err error
			if n.Agent, err = r.str(field + "[0]"); err != nil {
				return err
			}
			if err := r.expect(',', field); err != nil {
				return err
			}
			if n.Msg, err = r.str(field + "[1]"); err != nil {
				return err
			}
			if err := r.expect(']', field); err != nil {
				return err
			}
			rec.Notifs = append(rec.Notifs, n)
			return nil
		})
	case OpError:
		switch key {
		case "call":
			rec.Call, err = r.str(key)
		case "id":
			var h int
			h, err = r.nullable(key)
			rec.ID, rec.HasID = h, h >= 0
			if h < 0 {
				rec.ID = 0
			}
		case "msg":
			rec.Msg, err = r.str(key)
		default:
			return unknown()
		}
	case OpDeregister:
		switch key {
		case "mem":
			rec.Mem, err = r.str(key)
		case "descs":
			err = r.descs(key, r.addTo(rec, &rec.Descs))
		default:
			return unknown()
		}
	case OpRemoveAgent:
		if key != "agent" {
			return unknown()
		}
		rec.Agent, err = r.str(key)
	case OpMemView:
		switch key {
		case "handle":
			rec.Handle, err = r.handle(key)
			if err == nil && rec.Handle == 0 {
				err = r.errf(key, "null: a memory view has a handle")
			}
		case "agent":
			rec.Agent, err = r.str(key)
		case "descs":
			err = r.descs(key, r.addTo(rec, &rec.Descs))
		default:
			return unknown()
		}
	}
	return err
}

// nullable reads a non-negative integer or null (-1).
func (r *Reader) nullable(field string) (int, error) {
	c, err := r.ws(field)
	if err != nil {
		return 0, err
	}
	if c == 'n' {
		for _, want := range []byte("ull") {
			c, err := r.byteAt(field)
			if err != nil {
				return 0, err
			}
			if c != want {
				return 0, r.errf(field, "want a number or null")
			}
		}
		return -1, nil
	}
	v, err := r.uintFrom(c, field, 1<<62)
	return int(v), err
}

// complete checks that a record has the keys its op needs.
func (r *Reader) complete(rec *Record, got *keySet) error {
	need := func(keys ...string) error {
		for _, k := range keys {
			if !got.has(k) {
				return r.errf(k, "missing from a %s record", rec.Op)
			}
		}
		return nil
	}
	switch rec.Op {
	case OpRegister:
		return need("mem", "descs")
	case OpDList:
		return need("handle", "agent", "descs")
	case OpState:
		return need("id", "state")
	case OpPost:
		return need("id", "notif")
	case OpNotif, OpRemoteDone:
		return need("agent", "msg")
	case OpNotifs:
		return need("notifs")
	case OpError:
		return need("call", "id", "msg")
	case OpDeregister:
		return need("mem", "descs")
	case OpRemoveAgent:
		return need("agent")
	case OpMemView:
		return need("handle", "agent", "descs")
	}
	if err := need("id", "kind", "notif"); err != nil {
		return err
	}
	prepped := got.has("local") || got.has("local_ids") || got.has("remote") || got.has("remote_ids")
	initialized := got.has("local_descs") || got.has("remote_descs") || got.has("remote_agent")
	switch {
	case prepped && initialized:
		return r.errf("", "an xfer record gives both prepared lists (local, remote) and descriptors (local_descs, remote_descs)")
	case prepped:
		rec.Prepped = true
		return need("local", "local_ids", "remote", "remote_ids")
	}
	return need("local_descs", "remote_descs", "remote_agent")
}
