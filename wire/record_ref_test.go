package wire

import (
	"errors"
	"fmt"
)

// oldSplitJSONDocs is the bracket matcher splitJSONDocs replaced, kept as
// a reference for its tests and benchmark: it splits data where brackets
// opened outside strings close (or a scalar meets whitespace).
func oldSplitJSONDocs(data []byte) ([][2]int, error) {
	var docs [][2]int
	i := 0
	for {
		for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
			i++
		}
		if i == len(data) {
			break
		}
		start := i
		depth, inString := 0, false
		for ; i < len(data); i++ {
			c := data[i]
			if inString {
				switch c {
				case '\\':
					i++
				case '"':
					inString = false
				}
				continue
			}
			switch c {
			case '"':
				inString = true
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			if depth == 0 && (c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				if c == '}' || c == ']' {
					i++
				}
				break
			}
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced %q at offset %d", c, i)
			}
		}
		if depth != 0 || inString {
			return nil, fmt.Errorf("unexpected end of input (a value opened at offset %d does not close)", start)
		}
		docs = append(docs, [2]int{start, min(i, len(data))})
	}
	if len(docs) == 0 {
		return nil, errors.New("unexpected end of JSON input")
	}
	return docs, nil
}
