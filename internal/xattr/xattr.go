// Package xattr sets and lists the extended attributes of files kvaudit
// writes or copies (vLLM's FS tier keeps a block's CRC in one): scrub
// writes stores with them, inject copies and tampers with them. It is not
// API.
package xattr

import "errors"

// ErrUnsupported is Set's error where the filesystem keeps no extended
// attributes.
var ErrUnsupported = errors.New("the filesystem keeps no extended attributes")
