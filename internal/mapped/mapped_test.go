package mapped

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

func TestMapFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.bin")
	want := bytes.Repeat([]byte("kvaudit"), 3000)
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != path || !bytes.Equal(m.Data, want) {
		t.Fatalf("Map(%q) = {%q, %d bytes}, want the file's %d bytes", path, m.Path, len(m.Data), len(want))
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if m.Data != nil {
		t.Error("Data is not nil after Close")
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	var nilMapping *Mapping
	if err := nilMapping.Close(); err != nil {
		t.Errorf("nil Close: %v", err)
	}
}

func TestMapFileErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.safetensors")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(empty)
	if m != nil || !errors.Is(err, ErrEmpty) {
		t.Fatalf("Map(empty) = %v, %v; want ErrEmpty", m, err)
	}
	if !strings.Contains(err.Error(), strconv.Quote(empty)) || !strings.Contains(err.Error(), "empty file") {
		t.Errorf("error %q does not name the file and say it is empty", err)
	}
	if _, err := Map(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Map(missing) error = %v, want ErrNotExist", err)
	}
	if _, err := Map(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Map(dir) error = %v, want not a regular file", err)
	}
}

func TestGuardTruncatedWhileMapped(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("files are read into memory on " + runtime.GOOS)
	}
	page := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "shrinking.bin")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xA5}, 4*page), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := os.Truncate(path, int64(page)); err != nil {
		t.Fatal(err)
	}
	var sum byte
	err = Guard(path, func() error {
		sum += m.Data[0] // still in the file
		sum += m.Data[3*page]
		t.Error("reading past the truncated end did not fault")
		return nil
	})
	var fe *FaultError
	if !errors.As(err, &fe) {
		t.Fatalf("Guard error = %v (%T), want a *FaultError", err, err)
	}
	msg := err.Error()
	for _, want := range []string{"reading " + strconv.Quote(path), "memory fault at 0x", "truncated or changed while mapped"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	// The guard leaves the goroutine's fault setting as it found it.
	if old := debug.SetPanicOnFault(false); old {
		t.Error("Guard left SetPanicOnFault on")
	}
}

func TestGuardPassesThrough(t *testing.T) {
	want := errors.New("from fn")
	if err := Guard("x", func() error { return want }); err != want {
		t.Errorf("Guard error = %v, want fn's error", err)
	}
	if err := Guard("x", func() error { return nil }); err != nil {
		t.Errorf("Guard error = %v, want nil", err)
	}
	debug.SetPanicOnFault(true)
	Guard("x", func() error { return nil })
	if old := debug.SetPanicOnFault(false); !old {
		t.Error("Guard did not restore SetPanicOnFault(true)")
	}
}

func TestGuardRepanics(t *testing.T) {
	recovered := func(fn func() error) (r any) {
		defer func() { r = recover() }()
		Guard("x", fn)
		return nil
	}
	if r := recovered(func() error { panic("boom") }); r != "boom" {
		t.Errorf("recovered %v, want the original panic", r)
	}
	var p *[8]byte
	r := recovered(func() error { _ = p[3]; return nil })
	if _, ok := r.(runtime.Error); !ok {
		t.Errorf("nil dereference: recovered %v (%T), want a re-panicked runtime.Error", r, r)
	}
	if _, ok := r.(*FaultError); ok {
		t.Error("nil dereference was turned into a FaultError")
	}
}

// countingReader counts the bytes it hands out.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestReadWhole: where there is no mmap, Map reads exactly the bytes the
// file's size at open counts: never more from a file that grew, an error
// naming the file for one truncated while read, ErrEmpty for none.
func TestReadWhole(t *testing.T) {
	grown := &countingReader{r: iotest.HalfReader(strings.NewReader("0123456789" + strings.Repeat("x", 1<<20)))}
	data, err := readWhole(grown, 10, "d/rank0.safetensors")
	if err != nil || string(data) != "0123456789" || cap(data) != 10 || grown.n != 10 {
		t.Errorf("a file grown past 10 bytes: %q (cap %d), %v; %d bytes read", data, cap(data), err, grown.n)
	}
	for _, c := range []struct {
		in   io.Reader
		size int64
		want string
	}{
		{strings.NewReader("01234"), 10, `mapping "d/rank0.safetensors": the file ends after 5 of its 10 bytes at open: it was truncated while read`},
		{strings.NewReader(""), 10, `mapping "d/rank0.safetensors": the file ends after 0 of its 10 bytes at open: it was truncated while read`},
		{iotest.ErrReader(errors.New("input/output error")), 10, `mapping "d/rank0.safetensors": input/output error`},
		{strings.NewReader("x"), 0, `mapping "d/rank0.safetensors": empty file`},
		{strings.NewReader("x"), -1, `mapping "d/rank0.safetensors": file size -1 cannot be mapped`},
	} {
		data, err := readWhole(c.in, c.size, "d/rank0.safetensors")
		if data != nil || err == nil || err.Error() != c.want {
			t.Errorf("size %d: got %q, %v; want %s", c.size, data, err, c.want)
		}
		if c.size == 0 && !errors.Is(err, ErrEmpty) {
			t.Errorf("an empty file: %v does not wrap ErrEmpty", err)
		}
	}
}
