package jsonscan

import "io"

// Kind is a token's kind: its first byte, for the JSON tokens.
type Kind byte

// The tokens Next returns.
const (
	End         Kind = 0   // the input ends after a complete top-level value
	Null        Kind = 'n' // null
	True        Kind = 't' // true
	False       Kind = 'f' // false
	String      Kind = '"' // a string (Bytes: decoded); IsKey says whether a key
	Number      Kind = '0' // a number (Bytes: its text)
	ObjectStart Kind = '{'
	ObjectEnd   Kind = '}'
	ArrayStart  Kind = '['
	ArrayEnd    Kind = ']'
)

// Bytes is the last String's decoded bytes or the last Number's text,
// valid until the next call.
func (s *Scanner) Bytes() []byte { return s.tok }

// IsKey says whether the last String was an object's key.
func (s *Scanner) IsKey() bool { return s.key }

// TokenOffset is the input offset of the last token's first byte.
func (s *Scanner) TokenOffset() int64 { return s.tokAt }

// Depth is the number of objects and arrays open.
func (s *Scanner) Depth() int { return len(s.stack) }

// Next returns the next token, checking it against the grammar: a key
// and a colon before each object value, commas between elements, brackets
// matched, nesting within Options.MaxDepth, and after the top-level value
// only whitespace (or, with Options.Stream, more values). At the end of
// the input after a complete value it returns End; an empty input is an
// ErrEOF (End with Options.Stream).
func (s *Scanner) Next() (Kind, error) {
	s.key = false
	for {
		c, ok := s.skipSpace()
		if !ok {
			if s.i >= len(s.buf) && (s.rerr == nil || s.rerr == io.EOF) && (s.state == stTop || (s.opt.Stream && s.state == stValue && len(s.stack) == 0)) {
				return End, nil
			}
			return 0, s.spaceErr()
		}
		switch s.state {
		case stTop:
			if !s.opt.Stream {
				return 0, s.charErr(s.i, "after top-level value")
			}
			s.state = stValue
			continue
		case stColon:
			if c != ':' {
				return 0, s.charErr(s.i, "after object key")
			}
			s.i++
			s.state = stValue
			continue
		case stComma:
			top := s.stack[len(s.stack)-1]
			switch {
			case c == ',':
				s.i++
				s.opened = false
				if top == '{' {
					s.state = stKey
				} else {
					s.state = stValue
				}
				continue
			case c == '}' && top == '{', c == ']' && top == '[':
				return s.close(), nil
			case top == '{':
				return 0, s.charErr(s.i, "after object key:value pair")
			}
			return 0, s.charErr(s.i, "after array element")
		case stKey:
			switch {
			case c == '"':
				if _, err := s.String(); err != nil {
					return 0, err
				}
				s.key = true
				s.state = stColon
				return String, nil
			case c == '}' && s.opened:
				return s.close(), nil
			}
			return 0, s.charErr(s.i, "looking for beginning of object key string")
		}
		// stValue
		switch c {
		case '{', '[':
			if len(s.stack) >= s.opt.MaxDepth {
				e := s.errAt(ErrDepth, s.i)
				e.Limit = uint64(s.opt.MaxDepth)
				return 0, e
			}
			s.tokAt = s.Offset()
			s.i++
			s.stack = append(s.stack, c)
			s.opened = true
			if c == '{' {
				s.state = stKey
			}
			return Kind(c), nil
		case ']':
			if s.opened && len(s.stack) > 0 && s.stack[len(s.stack)-1] == '[' {
				return s.close(), nil
			}
		case '"':
			if _, err := s.String(); err != nil {
				return 0, err
			}
			s.valueDone()
			return String, nil
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			if _, err := s.Number(); err != nil {
				return 0, err
			}
			s.valueDone()
			return Number, nil
		case 'n', 't', 'f':
			k, err := s.Literal()
			if err != nil {
				return 0, err
			}
			s.valueDone()
			return k, nil
		}
		return 0, s.charErr(s.i, "looking for beginning of value")
	}
}

// close consumes the bracket that ends the innermost container.
func (s *Scanner) close() Kind {
	s.tokAt = s.Offset()
	c := s.buf[s.i]
	s.i++
	s.stack = s.stack[:len(s.stack)-1]
	s.valueDone()
	return Kind(c)
}

// valueDone moves past a complete value.
func (s *Scanner) valueDone() {
	s.opened = false
	if len(s.stack) == 0 {
		s.state = stTop
	} else {
		s.state = stComma
	}
}

// Skip skips the value whose first token Next has just returned: for an
// ObjectStart or ArrayStart, up to and including its end; for any other
// token, nothing.
func (s *Scanner) Skip(k Kind) error {
	if k != ObjectStart && k != ArrayStart {
		return nil
	}
	for depth := len(s.stack); len(s.stack) >= depth; {
		if _, err := s.Next(); err != nil {
			return err
		}
	}
	return nil
}
