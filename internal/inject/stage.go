package inject

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/kvaudit/kvaudit/internal/safeio"
)

// This file holds the output directories: checks before anything is
// written, the staged directory that becomes the output when complete.

// prepareOut creates a scratch output directory (the campaign's trials,
// Prepare's copy), which must not exist or be empty.
func prepareOut(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("output directory %q is not empty", out)
	}
	return nil
}

// checkOut refuses, before anything is copied, an output directory that
// Inject would not be allowed to replace.
func checkOut(out string, force bool) error {
	st, err := os.Lstat(out)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		return &safeio.LinkError{Path: out}
	}
	if !st.IsDir() {
		return fmt.Errorf("output %q exists and is not a directory", out)
	}
	entries, err := os.ReadDir(out)
	if err != nil || len(entries) == 0 {
		return err
	}
	if !force {
		return fmt.Errorf("output directory %q is not empty (--force replaces a previous kvaudit inject output)", out)
	}
	return injectOutput(out)
}

// injectOutput accepts a directory that a previous injection wrote (it
// holds fault.json): the only kind --force replaces.
func injectOutput(dir string) error {
	if st, err := os.Lstat(filepath.Join(dir, FaultFile)); err == nil && st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("output directory %q holds no %s: --force replaces only a previous kvaudit inject output", dir, FaultFile)
}

// staged runs fill on a new temporary directory beside out and renames it
// to out when fill succeeds; otherwise (an error, a signal) the
// temporary directory is removed and out is left as it was.
func staged(out string, force bool, fill func(stage string) error) error {
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	stage, err := safeio.StageDir(parent, "."+filepath.Base(out)+".kvaudit-tmp-")
	if err != nil {
		return err
	}
	defer safeio.RemoveTemp(stage)
	if err := os.Chmod(stage, 0o755); err != nil { // it becomes out
		return err
	}
	if err := fill(stage); err != nil {
		return err
	}
	return safeio.PlaceDir(stage, out, force, injectOutput)
}

// writeNew writes data to a file that must not exist yet, complete or not
// at all.
func writeNew(path string, data []byte) error {
	return safeio.WriteFile(path, data, false)
}
