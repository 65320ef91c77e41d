package cli

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/testfiles"
)

// outputFixture writes a producer, a consumer and the consumer's NIXL log
// of the pull into a new directory, makes it the working directory, and
// returns it: producer/rank-0-0.safetensors, consumer/rank-0-0.safetensors,
// nixl/consumer-pp0-tp0.jsonl.
func outputFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, args := range [][]string{
		{"synth", "--out", root, "--preset", "tiny", "--role", "producer"},
		{"synth", "--out", root, "--preset", "tiny", "--role", "consumer", "--transfers"},
	} {
		if code, _, stderr := run(t, args...); code != ExitOK {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
	}
	for _, f := range []string{"producer/rank-0-0.safetensors", "consumer/rank-0-0.safetensors", "nixl/consumer-pp0-tp0.jsonl"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(root)
	return root
}

const (
	fxDump = "consumer/rank-0-0.safetensors"
	fxLog  = "nixl/consumer-pp0-tp0.jsonl"
)

// refused runs each command and wants it refused before any work as a
// usage error (exit 3, naming the input), every input file unchanged
// and nothing added among them.
func refused(t *testing.T, root string, cases [][]string) {
	t.Helper()
	for _, args := range cases {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			before := testfiles.HashTree(t, root)
			code, _, stderr := run(t, args...)
			if code != ExitInvalid {
				t.Errorf("exit %d, want %d (a usage error)\n%s", code, ExitInvalid, stderr)
			}
			if !strings.Contains(stderr, "input") {
				t.Errorf("the refusal does not name the input:\n%s", stderr)
			}
			testfiles.AssertUnchanged(t, root, before)
		})
	}
}

// Attack 1 of issue 33: an output file that is an input, or a link to
// one, or a hard link of one, or inside an input directory, is refused
// for every flag that writes a file, as --html already was
// (`diff --junit C/rank-0-0.safetensors P C` replaced the consumer's dump
// with JUnit XML, exit 0).
func TestOutputIsNeverAnInput(t *testing.T) {
	root := outputFixture(t)
	// The links live outside the inputs' tree (it is hashed).
	l := t.TempDir()
	link, linkdir, hard, dangling := filepath.Join(l, "link.safetensors"), filepath.Join(l, "linkdir"), filepath.Join(l, "hard.jsonl"), filepath.Join(l, "consumer-link.xml")
	if err := os.Symlink(filepath.Join(root, fxDump), link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "consumer"), linkdir); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(fxLog, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "consumer", "gone.xml"), dangling); err != nil {
		t.Fatal(err)
	}
	refused(t, root, [][]string{
		{"diff", "--junit", fxDump, "producer", "consumer"},
		{"diff", "--junit", "consumer/new.xml", "producer", "consumer"},
		{"diff", "--junit", link, "producer", "consumer"},
		{"diff", "--junit", linkdir + "/rank-0-0.safetensors", "producer", "consumer"},
		{"diff", "--junit", dangling, "producer", "consumer"},
		{"diff", "--junit", hard, "producer", "consumer", "--transfers", "nixl"},
		{"diff", "--html", link, "producer", "consumer"},
		{"transfers", fxLog, "--producer", "producer", "--consumer", "consumer", "--junit", fxLog},
		{"transfers", "nixl", "--producer", "producer", "--consumer", "consumer", "--junit", hard},
		{"transfers", "nixl", "--producer", "producer", "--consumer", "consumer", "--html", "producer/t.html"},
		{"campaign", "--trials", "1", "--fault", "bit-flip", "producer", "consumer", "--junit", fxDump},
		{"campaign", "--trials", "1", "--fault", "bit-flip", "producer", "consumer", "--junit", link},
		{"checksum", "--partial", "-o", "record", "--out", linkdir, "consumer"},
		{"inject", "consumer", "--fault", "bit-flip", "--out", linkdir + "/x"},
	})
}

// Attack 2 of issue 33: inputs given as globs (kvaudit expands them) are
// checked after expansion: `diff --html C/rank-0-0.safetensors 'P*' 'C*'`
// replaced the dump, `transfers 'nixl/*.jsonl' --html nixl/LOG` the log,
// `checksum --partial -o record --out SIDE 'SID*'` wrote into the side.
func TestOutputAfterGlobs(t *testing.T) {
	root := outputFixture(t)
	refused(t, root, [][]string{
		{"diff", "--html", fxDump, "prod*", "cons*"},
		{"diff", "--junit", fxDump, "prod*", "cons*"},
		{"diff", "--junit", "consumer/x.xml", "--producer", "prod*", "--consumer", "c?nsumer"},
		{"diff", "--html", fxLog, "producer", "consumer", "--transfers", "nixl/*.jsonl"},
		{"transfers", "nixl/*.jsonl", "--producer", "producer", "--consumer", "consumer", "--html", fxLog},
		{"transfers", "nixl/*.jsonl", "--producer", "prod*", "--consumer", "cons*", "--junit", fxDump},
		{"checksum", "--partial", "-o", "record", "--out", "consumer", "cons*"},
		{"checksum", "--partial", "-o", "record", "--out", "consumer/sub", "[c]onsumer"},
		{"inject", "cons*", "--fault", "bit-flip", "--out", "consumer/x"},
		{"campaign", "--trials", "1", "--fault", "bit-flip", "prod*", "cons*", "--html", "consumer/c.html"},
		{"campaign", "--trials", "1", "--fault", "bit-flip", "prod*", "cons*", "--junit", fxDump},
	})
}

// streamCase is an output that is a stream: the path given, and what reads
// what kvaudit wrote into it.
type streamCase struct {
	name string
	path string
	read func() string
	done func(t *testing.T) // checks what is at the path afterwards
}

// streams makes the streams of attack 3 in dir: a FIFO, a link to a FIFO,
// a link to /dev/null, and this process's descriptor of a pipe as
// /proc/self/fd/N and through a link (as /dev/stdout is one).
func streams(t *testing.T, dir string) []streamCase {
	t.Helper()
	var cs []streamCase
	fifo := func(name string, link bool) streamCase {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("no FIFO here: %v", err)
		}
		path := p
		if link {
			path = p + ".link"
			if err := os.Symlink(p, path); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan string, 1)
		go func() {
			f, err := os.Open(p) // blocks until kvaudit opens it for writing
			if err != nil {
				got <- err.Error()
				return
			}
			b, _ := io.ReadAll(f)
			f.Close()
			got <- string(b)
		}()
		read := func() string {
			select {
			case b := <-got:
				return b
			case <-time.After(20 * time.Second):
				// Nothing opened it: let the reader go.
				if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					f.Close()
				}
				return "(the FIFO was never opened for writing)"
			}
		}
		return streamCase{name, path, read, func(t *testing.T) {
			if st, err := os.Lstat(p); err != nil || st.Mode()&fs.ModeNamedPipe == 0 {
				t.Errorf("%s is no longer a FIFO: %v %v", p, st.Mode(), err)
			}
			if link {
				if st, err := os.Lstat(path); err != nil || st.Mode()&fs.ModeSymlink == 0 {
					t.Errorf("%s is no longer a link: %v", path, err)
				}
			}
		}}
	}
	cs = append(cs, fifo("fifo", false), fifo("fifo2", true))
	null := filepath.Join(dir, "null")
	if err := os.Symlink("/dev/null", null); err != nil {
		t.Fatal(err)
	}
	cs = append(cs, streamCase{"link to /dev/null", null, func() string { return "" }, func(t *testing.T) {
		if st, err := os.Lstat(null); err != nil || st.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is no longer a link to /dev/null: %v %v", null, st.Mode(), err)
		}
		if st, err := os.Stat(null); err != nil || st.Mode()&fs.ModeCharDevice == 0 {
			t.Errorf("/dev/null is not a character device: %v", err)
		}
	}})
	fd := func(name string, link bool) streamCase {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		path := fmt.Sprintf("/proc/self/fd/%d", w.Fd())
		if _, err := os.Stat(path); err != nil {
			t.Skipf("no /proc/self/fd here: %v", err)
		}
		if link {
			l := filepath.Join(dir, name)
			if err := os.Symlink(path, l); err != nil {
				t.Fatal(err)
			}
			path = l
		}
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(r)
			r.Close()
			got <- string(b)
		}()
		return streamCase{name, path, func() string { w.Close(); return <-got }, func(t *testing.T) {
			if link {
				if st, err := os.Lstat(path); err != nil || st.Mode()&fs.ModeSymlink == 0 {
					t.Errorf("%s is no longer a link: %v", path, err)
				}
			}
		}}
	}
	return append(cs, fd("proc-fd", false), fd("stdout-like", true))
}

// Attack 3 of issue 33: an output that is a character device, a FIFO or a
// descriptor of kvaudit (/dev/stdout, a link to /proc/self/fd/1) is
// written to as it is, never replaced by a regular file through the
// atomic rename (as root, `--junit /dev/null` replaced the system's
// node). This test uses a link to /dev/null, FIFOs and a pipe's
// descriptor in a temporary directory; it never writes at /dev itself.
func TestOutputStreamsWrittenAsTheyAre(t *testing.T) {
	root := outputFixture(t)
	dir := t.TempDir()
	type command struct {
		name string
		args func(out string) []string
		want string // in what a stream (not /dev/null) reads
	}
	commands := []command{
		{"diff --junit", func(o string) []string { return []string{"diff", "producer", "consumer", "--junit", o} }, "<testsuites"},
		{"diff --html", func(o string) []string { return []string{"diff", "producer", "consumer", "--html", o} }, "<!DOCTYPE html>"},
		{"transfers --junit", func(o string) []string {
			return []string{"transfers", "nixl", "--producer", "producer", "--consumer", "consumer", "--junit", o}
		}, "<testsuites"},
		{"transfers --html", func(o string) []string {
			return []string{"transfers", "nixl", "--producer", "producer", "--consumer", "consumer", "--html", o}
		}, "<!DOCTYPE html>"},
		{"campaign --junit", func(o string) []string {
			return []string{"campaign", "--trials", "1", "--fault", "bit-flip", "producer", "consumer", "--junit", o}
		}, "<testsuites"},
		{"demo --html", func(o string) []string { return []string{"demo", "--html", o} }, "<!DOCTYPE html>"},
	}
	for i, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(dir, fmt.Sprint(i))
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, s := range streams(t, d) {
				t.Run(s.name, func(t *testing.T) {
					before := testfiles.HashTree(t, root)
					code, _, stderr := run(t, c.args(s.path)...)
					got := s.read()
					if code != ExitOK {
						t.Fatalf("exit %d\n%s", code, stderr)
					}
					if s.name != "link to /dev/null" && !strings.Contains(got, c.want) {
						t.Errorf("the stream read %d bytes without %q:\n%.300s", len(got), c.want, got)
					}
					s.done(t)
					testfiles.AssertUnchanged(t, root, before)
				})
			}
		})
	}
}
