package nixl

import (
	"fmt"
	"io"
	"strconv"

	"github.com/kvaudit/kvaudit/internal/jsonscan"
	"github.com/kvaudit/kvaudit/parse"
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
	sc     *jsonscan.Scanner
	name   string
	line   int
	header Header
	eof    bool
	sink   func(Op, Desc)
	// mono is the last t_mono_ns read (hasMono: one was), which the next
	// may not precede.
	mono    int64
	hasMono bool
	// keys are the keys of the line being read (reused).
	keys keySet
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
	sc := jsonscan.NewReader(r, jsonscan.Options{Lines: true, MaxString: MaxString, LoneSurrogates: true})
	lr := &Reader{sc: sc, name: name, line: 1}
	if err := lr.readHeader(); err != nil {
		return nil, err
	}
	return lr, nil
}

// Header returns the log's header.
func (r *Reader) Header() Header { return r.header }

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
	v, err := r.uint(field, 1<<63-1)
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
	if r.sc.AtEnd() {
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
	case OpRegister, OpDeregister:
		switch key {
		case "mem":
			rec.Mem, err = r.str(key)
		case "descs":
			err = r.descs(key, r.addTo(rec, &rec.Descs))
		default:
			return unknown()
		}
	case OpDList, OpMemView:
		switch key {
		case "handle":
			rec.Handle, err = r.handle(key)
			if err == nil && rec.Handle == 0 {
				what := "a prepared list"
				if rec.Op == OpMemView {
					what = "a memory view"
				}
				err = r.errf(key, "null: %s has a handle", what)
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
			r.sc.Advance()
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
	case OpRemoveAgent:
		if key != "agent" {
			return unknown()
		}
		rec.Agent, err = r.str(key)
	}
	return err
}

// nullable reads a non-negative integer or null (-1).
func (r *Reader) nullable(field string) (int, error) {
	c, err := r.peek(field)
	if err != nil {
		return 0, err
	}
	if c == 'n' {
		return -1, r.null(field, "want a number or null")
	}
	v, err := r.uint(field, 1<<62)
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
