//go:build !linux

package inject

import (
	"errors"
	"os"
)

// errNoXattrs: the filesystem keeps no extended attributes.
var errNoXattrs = errors.New("the filesystem keeps no extended attributes")

// xattrs lists the extended attributes of the file at path (none here).
func xattrs(string) (map[string][]byte, error) { return nil, nil }

// setXattr sets or removes an extended attribute (not here).
func setXattr(*os.File, string, []byte) error { return errNoXattrs }
