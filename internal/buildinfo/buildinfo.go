// Package buildinfo says which build of kvaudit is running, for the
// runner protocol's handshake and kvaudit-cuda's version line. It imports
// only runtime/debug: kvaudit-cuda's start package, whose init must run
// before gorgonia.org/cu's, imports it (see its package doc).
package buildinfo

import "runtime/debug"

// Version returns the main module's version and the first 12 digits of
// its VCS revision ("v1.2.0 0123456789ab", "(devel) 0123456789ab"), or
// "unknown" without build information.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
