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
// token, nothing. It checks what it skips as Next does, and fails as Next
// would, at the same offset.
func (s *Scanner) Skip(k Kind) error {
	if k != ObjectStart && k != ArrayStart {
		return nil
	}
	for depth := len(s.stack); ; {
		s.skipRun(depth)
		if len(s.stack) < depth {
			return nil
		}
		if _, err := s.Next(); err != nil {
			return err
		}
		if len(s.stack) < depth {
			return nil
		}
	}
}

// skipRun is Skip's fast path: it reads on as Next would, without
// returning tokens, while the tokens are simple and held whole in the
// buffer (whitespace, commas, colons, brackets, strings without escapes or
// non-ASCII bytes, integers, literals), and stops at the first other
// byte, at the end of the buffer, or once the container open at depth
// has closed. Next reads what it stops at, and words any error. It leaves
// the Scanner as Next would (TokenOffset, Bytes included). It works on
// copies of the Scanner's fields, written back when it stops.
func (s *Scanner) skipRun(depth int) {
	buf, i := s.buf, s.i
	state, opened, stack := s.state, s.opened, s.stack
	at, tok, hasTok := -1, []byte(nil), false // the last token's
	space := &jsonSpace
	if s.opt.Lines {
		space = &lineSpace
	}
	maxDepth := s.opt.MaxDepth
	for {
		for i < len(buf) && space[buf[i]] {
			i++
		}
		if i >= len(buf) {
			break
		}
		c := buf[i]
		closes := false // c closes the innermost container
		switch state {
		case stComma:
			top := stack[len(stack)-1]
			if c == ',' {
				i++
				opened = false
				state = stValue
				if top == '{' {
					state = stKey
				}
				continue
			}
			closes = c == top+2 // '{'+2 is '}', '['+2 is ']'
		case stColon:
			if c != ':' {
				goto stop
			}
			i++
			state = stValue
			continue
		case stKey:
			if c == '"' {
				j, ok := s.plainString(buf, i)
				if !ok {
					goto stop
				}
				at, tok, hasTok = i, buf[i+1:j-1], true
				i = j
				state = stColon
				continue
			}
			closes = c == '}' && opened
		case stValue:
			switch c {
			case '{', '[':
				if len(stack) >= maxDepth {
					goto stop
				}
				at = i
				i++
				stack = append(stack, c)
				opened = true
				if c == '{' {
					state = stKey
				}
				continue
			case ']':
				closes = opened && stack[len(stack)-1] == '['
			case '"':
				j, ok := s.plainString(buf, i)
				if !ok {
					goto stop
				}
				at, tok, hasTok = i, buf[i+1:j-1], true
				i = j
				opened, state = false, stComma // a value inside the container
				continue
			case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
				j, ok := s.intEnd(buf, i)
				if !ok {
					goto stop
				}
				at, tok, hasTok = i, buf[i:j], true
				i = j
				opened, state = false, stComma
				continue
			case 't', 'f', 'n':
				word := "null"
				if c == 't' {
					word = "true"
				} else if c == 'f' {
					word = "false"
				}
				if len(buf)-i < len(word) || string(buf[i:i+len(word)]) != word {
					goto stop
				}
				at = i
				i += len(word)
				opened, state = false, stComma
				continue
			}
		}
		if !closes {
			break // Next reads it
		}
		at = i
		i++
		stack = stack[:len(stack)-1]
		opened, state = false, stComma
		if len(stack) == 0 {
			state = stTop
		}
		if len(stack) < depth {
			break
		}
	}
stop:
	s.i, s.state, s.opened, s.stack = i, state, opened, stack
	if at >= 0 {
		s.tokAt = s.base + int64(at)
	}
	if hasTok {
		s.tok = tok
	}
}

// jsonSpace marks JSON's whitespace, lineSpace that of a line of JSON
// Lines (not the newline).
var jsonSpace, lineSpace = [256]bool{' ': true, '\t': true, '\r': true, '\n': true}, [256]bool{' ': true, '\t': true, '\r': true}

// plainString returns the index past the string at buf[i] when it holds
// no escape, control character or non-ASCII byte, ends within buf and
// within Options.MaxString.
func (s *Scanner) plainString(buf []byte, i int) (int, bool) {
	j := plainRun(buf, i+1)
	for j < len(buf) && !special[buf[j]] {
		j++
	}
	if j >= len(buf) || buf[j] != '"' || (s.opt.MaxString > 0 && j-i-1 > s.opt.MaxString) {
		return 0, false
	}
	return j + 1, true
}
