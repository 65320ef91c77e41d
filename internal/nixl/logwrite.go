package nixl

import (
	"bufio"
	"io"
	"strconv"
)

// Writer writes a log as the recorder does (kvaudit_export.nixl_log): the
// header, then one compact JSON object per line, strings ASCII with \u
// escapes as Python's json.dumps writes them. Errors stick: Flush
// returns the first.
type Writer struct {
	w   *bufio.Writer
	err error
	buf []byte
}

// NewWriter starts a log on w with its header.
func NewWriter(w io.Writer, h Header) *Writer {
	lw := &Writer{w: bufio.NewWriterSize(w, 1<<16)}
	b := append(lw.buf[:0], `{"format":`...)
	b = appendString(b, LogFormat)
	b = append(b, `,"agent":`...)
	b = appendString(b, h.Agent)
	b = append(b, `,"tp_rank":`...)
	b = strconv.AppendInt(b, int64(h.TPRank), 10)
	b = append(b, `,"pp_rank":`...)
	b = strconv.AppendInt(b, int64(h.PPRank), 10)
	if h.HasLease {
		b = strconv.AppendInt(append(b, `,"lease_s":`...), int64(h.LeaseS), 10)
	}
	if h.EngineID != "" {
		b = appendString(append(b, `,"engine_id":`...), h.EngineID)
	}
	b = appendStamp(b, h.Time)
	lw.line(append(b, "}\n"...))
	return lw
}

// appendStamp writes a record's timestamps, if it has them.
func appendStamp(b []byte, t Stamp) []byte {
	if !t.Ok {
		return b
	}
	b = strconv.AppendInt(append(b, `,"t_mono_ns":`...), t.Mono, 10)
	return strconv.AppendInt(append(b, `,"t_wall_ns":`...), t.Wall, 10)
}

func (w *Writer) line(b []byte) {
	w.buf = b[:0]
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// Write writes one record (its Line is not written).
func (w *Writer) Write(rec *Record) {
	b := append(w.buf[:0], `{"op":`...)
	b = appendString(b, rec.Op.String())
	switch rec.Op {
	case OpRegister:
		b = append(b, `,"mem":`...)
		b = appendString(b, rec.Mem)
		b = appendDescs(append(b, `,"descs":`...), rec.Descs)
	case OpDList:
		b = strconv.AppendInt(append(b, `,"handle":`...), int64(rec.Handle), 10)
		b = appendString(append(b, `,"agent":`...), rec.Agent)
		b = appendDescs(append(b, `,"descs":`...), rec.Descs)
	case OpXfer:
		b = strconv.AppendInt(append(b, `,"id":`...), int64(rec.ID), 10)
		b = appendString(append(b, `,"kind":`...), rec.Kind)
		if rec.Prepped {
			b = appendHandle(append(b, `,"local":`...), rec.Local)
			b = appendIDs(append(b, `,"local_ids":`...), rec.LocalIDs)
			b = appendHandle(append(b, `,"remote":`...), rec.Remote)
			b = appendIDs(append(b, `,"remote_ids":`...), rec.RemoteIDs)
		} else {
			b = appendDescs(append(b, `,"local_descs":`...), rec.LocalDescs)
			b = appendDescs(append(b, `,"remote_descs":`...), rec.RemoteDescs)
			b = appendString(append(b, `,"remote_agent":`...), rec.RemoteAgent)
		}
		b = appendString(append(b, `,"notif":`...), rec.Notif)
		if rec.HasRequest {
			b = appendString(append(b, `,"request":`...), rec.Request)
		}
	case OpState:
		b = strconv.AppendInt(append(b, `,"id":`...), int64(rec.ID), 10)
		b = appendString(append(b, `,"state":`...), rec.State)
	case OpPost:
		b = strconv.AppendInt(append(b, `,"id":`...), int64(rec.ID), 10)
		b = appendString(append(b, `,"notif":`...), rec.Notif)
	case OpNotif, OpRemoteDone:
		b = appendString(append(b, `,"agent":`...), rec.Agent)
		b = appendString(append(b, `,"msg":`...), rec.Msg)
	case OpNotifs:
		b = append(b, `,"notifs":[`...)
		for i, n := range rec.Notifs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(append(b, '['), n.Agent)
			b = append(appendString(append(b, ','), n.Msg), ']')
		}
		b = append(b, ']')
	case OpError:
		b = appendString(append(b, `,"call":`...), rec.Call)
		if rec.HasID {
			b = strconv.AppendInt(append(b, `,"id":`...), int64(rec.ID), 10)
		} else {
			b = append(b, `,"id":null`...)
		}
		b = appendString(append(b, `,"msg":`...), rec.Msg)
	case OpDeregister:
		b = appendString(append(b, `,"mem":`...), rec.Mem)
		b = appendDescs(append(b, `,"descs":`...), rec.Descs)
	case OpRemoveAgent:
		b = appendString(append(b, `,"agent":`...), rec.Agent)
	case OpMemView:
		b = strconv.AppendInt(append(b, `,"handle":`...), int64(rec.Handle), 10)
		b = appendString(append(b, `,"agent":`...), rec.Agent)
		b = appendDescs(append(b, `,"descs":`...), rec.Descs)
	}
	b = appendStamp(b, rec.Time)
	w.line(append(b, "}\n"...))
}

// Flush writes what is buffered and returns the first error.
func (w *Writer) Flush() error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

func appendHandle(b []byte, h int) []byte {
	if h == 0 {
		return append(b, "null"...)
	}
	return strconv.AppendInt(b, int64(h), 10)
}

func appendIDs(b []byte, ids []int) []byte {
	b = append(b, '[')
	for i, v := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, ']')
}

func appendDescs(b []byte, ds []Desc) []byte {
	b = append(b, '[')
	for i, d := range ds {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `["0x`...)
		b = strconv.AppendUint(b, d.Addr, 16)
		b = append(b, `",`...)
		b = strconv.AppendUint(b, d.Len, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(d.Dev), 10)
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendString writes s as Python's json.dumps does (ensure_ascii).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	u := func(r rune) { b = append(b, '\\', 'u', hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15]) }
	b = append(b, '"')
	for _, r := range s {
		switch {
		case r == '"':
			b = append(b, `\"`...)
		case r == '\\':
			b = append(b, `\\`...)
		case r == '\n':
			b = append(b, `\n`...)
		case r == '\r':
			b = append(b, `\r`...)
		case r == '\t':
			b = append(b, `\t`...)
		case r == '\b':
			b = append(b, `\b`...)
		case r == '\f':
			b = append(b, `\f`...)
		case r < 0x20 || (r >= 0x7f && r <= 0xffff):
			u(r)
		case r > 0xffff:
			r -= 0x10000
			u(0xd800 + r>>10)
			u(0xdc00 + r&0x3ff)
		default:
			b = append(b, byte(r))
		}
	}
	return append(b, '"')
}
