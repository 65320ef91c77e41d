//go:build !linux

package xattr

import "os"

// List returns the extended attributes of the file at path (none here).
func List(string) (map[string][]byte, error) { return nil, nil }

// Set sets or removes an extended attribute (not here).
func Set(*os.File, string, []byte) error { return ErrUnsupported }
