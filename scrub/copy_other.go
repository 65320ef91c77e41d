//go:build !linux

package scrub

import "os"

// Xattrs lists the extended attributes of the file at path (none here).
func Xattrs(string) (map[string][]byte, error) { return nil, nil }

// SetXattr sets or removes an extended attribute (not here).
func SetXattr(*os.File, string, []byte) error { return errNoXattrs }
