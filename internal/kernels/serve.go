package kernels

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/kvaudit/kvaudit/checksum"
	"github.com/kvaudit/kvaudit/internal/buildinfo"
	"github.com/kvaudit/kvaudit/internal/ckplan"
	"github.com/kvaudit/kvaudit/layout"
)

// Device is what Serve runs requests on: the CUDA engine in kvaudit-cuda,
// the Model in tests. Serve calls it from one goroutine, the one that
// called Serve (CUDA contexts are bound to an OS thread).
type Device interface {
	checksum.Engine
	// Hello describes the device for the handshake (Protocol is filled
	// in by Serve).
	Hello() Hello
	// Bench times the kernel on a cache allocated on the device.
	Bench(ctx context.Context, req BenchRequest) (*BenchResult, error)
}

// Serve speaks the runner protocol (protocol.go) on in and out until in
// ends: it writes dev's Hello, then answers every request. An error in a
// request is answered as such; Serve returns an error only when it cannot
// read or write the protocol. Dumps it opens stay open until it returns.
func Serve(ctx context.Context, in io.Reader, out io.Writer, dev Device) error {
	s := &server{ctx: ctx, out: bufio.NewWriter(out), dev: dev, dumps: map[string]*layout.Dump{}}
	defer s.close()
	hello := dev.Hello()
	hello.Protocol = ProtocolVersion
	if err := s.send(hello); err != nil {
		return err
	}
	r := bufio.NewReaderSize(in, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			if err := s.handle(line); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading requests: %w", err)
		}
	}
}

type server struct {
	ctx   context.Context
	out   *bufio.Writer
	dev   Device
	dumps map[string]*layout.Dump
}

func (s *server) close() {
	for _, d := range s.dumps {
		d.Close()
	}
}

func (s *server) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.out.Write(append(b, '\n'))
	return s.out.Flush()
}

func (s *server) handle(line []byte) error {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return s.send(Response{Done: true, Error: fmt.Sprintf("bad request: %v", err)})
	}
	resp := Response{ID: req.ID, Done: true}
	switch req.Op {
	case OpChecksum:
		out, err := s.checksum(&req)
		if err != nil {
			resp.Error = err.Error()
		} else {
			resp.Out = make([]layout.Hex64, len(out))
			for i, v := range out {
				resp.Out[i] = layout.Hex64(v)
			}
		}
	case OpBench:
		if req.Bench == nil {
			resp.Error = "bench: no parameters"
			break
		}
		res, err := s.dev.Bench(s.ctx, *req.Bench)
		if err != nil {
			resp.Error = err.Error()
		}
		resp.Bench = res
	default:
		resp.Error = fmt.Sprintf("unknown op %q (want %q or %q)", req.Op, OpChecksum, OpBench)
	}
	return s.send(resp)
}

// checksum resolves a checksum request against the runner's own view of
// the dump and runs it.
func (s *server) checksum(req *Request) ([]uint64, error) {
	if !filepath.IsAbs(req.Dump) {
		return nil, fmt.Errorf("dump path %q is not absolute", req.Dump)
	}
	if req.Outputs < 0 || req.Outputs > maxOutputs {
		return nil, fmt.Errorf("%d outputs (want 0..%d)", req.Outputs, maxOutputs)
	}
	d, ok := s.dumps[req.Dump]
	if !ok {
		var err error
		if d, err = layout.Open(req.Dump); err != nil {
			return nil, err
		}
		s.dumps[req.Dump] = d
	}
	plan := &ckplan.Plan{Dump: d, Outputs: req.Outputs}
	for ti, t := range req.Tasks {
		c, err := findCache(d, t)
		if err != nil {
			return nil, fmt.Errorf("task %d: %w", ti, err)
		}
		S := c.Cells.KernelBlocks * c.Cells.KernelTokens
		rows := make([]ckplan.Row, len(t.Rows))
		for i, r := range t.Rows {
			row := ckplan.Row{Block: int(r[0]), FirstToken: r[1], Valid: int(r[2]), Out: int(r[3])}
			if r[0] < 0 || r[0] >= int64(d.Manifest.NumBlocks) || r[1] < 0 || r[1] > 1<<40 ||
				r[2] < 1 || r[2] > int64(S) || r[3] < 0 || r[3] >= int64(req.Outputs) {
				return nil, fmt.Errorf("task %d: row %d %v: want [block < %d, first token >= 0, valid tokens 1..%d, output slot < %d]",
					ti, i, r, d.Manifest.NumBlocks, S, req.Outputs)
			}
			rows[i] = row
		}
		plan.Tasks = append(plan.Tasks, ckplan.Task{Cache: c, Rows: rows})
	}
	var mu sync.Mutex
	var sendErr error
	plan.Progress = func(n int64) {
		mu.Lock()
		defer mu.Unlock()
		if sendErr == nil && n > 0 {
			sendErr = s.send(Response{ID: req.ID, Progress: n})
		}
	}
	out := make([]uint64, req.Outputs)
	if err := s.dev.Run(s.ctx, plan, out); err != nil {
		return nil, err
	}
	return out, sendErr
}

// findCache returns the cache a task names, checking its geometry.
func findCache(d *layout.Dump, t TaskMessage) (*layout.LayerView, error) {
	g := d.GroupView(t.Group)
	if g == nil {
		return nil, fmt.Errorf("dump %q has no group %d", d.Path, t.Group)
	}
	if g.Skip != "" {
		return nil, fmt.Errorf("dump %q: group %d is not checksummed: %s", d.Path, t.Group, g.Skip)
	}
	if t.Cache < 0 || t.Cache >= len(g.Caches) || g.Caches[t.Cache].Layer.Name != t.Layer {
		return nil, fmt.Errorf("dump %q: group %d has no cache %q at index %d", d.Path, t.Group, t.Layer, t.Cache)
	}
	c := g.Caches[t.Cache]
	if sig := Signature(c); sig != t.Geometry {
		return nil, fmt.Errorf("dump %q: layer %q: kvaudit sees %q, the runner %q: are kvaudit and kvaudit-cuda of the same release?", d.Path, t.Layer, t.Geometry, sig)
	}
	return c, nil
}

// ModelDevice serves the protocol with the Model on the CPU: the tests'
// runner, and a way to try kvaudit's client without a GPU.
type ModelDevice struct{ Model }

// Hello describes the model.
func (ModelDevice) Hello() Hello {
	return Hello{Runner: "kvaudit-model", Version: buildinfo.Version(), Device: "Go model of the CUDA kernel (CPU)"}
}

// Bench runs the benchmark's steps on the CPU on at most 16 MiB: the model
// in place, a plain read and a copy. Its figures say nothing about a GPU;
// it exercises the benchmark's code paths.
func (m ModelDevice) Bench(ctx context.Context, req BenchRequest) (*BenchResult, error) {
	c, rows := BenchCache(min(req.Bytes, 16<<20))
	blocks := int(c.Cells.Device.Shape[1])
	buf := make([]byte, int64(blocks)*BenchSampleBytes)
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], FillWord(1, uint64(i/8)))
	}
	c.Cells.Device = nil
	c.Cells.Data = buf
	res := &BenchResult{Device: m.Hello().Device, Cache: BenchDescription(benchWithShape(blocks)), Bytes: int64(len(buf)), Reps: max(1, req.Reps)}
	plan := &ckplan.Plan{Dump: &layout.Dump{Path: "bench"}, Tasks: []ckplan.Task{{Cache: c, Rows: rows}}, Outputs: blocks}
	var tc, tr, tcp []float64
	out := make([]uint64, blocks)
	dst := make([]byte, len(buf))
	for range res.Reps {
		clear(out)
		t := time.Now()
		if err := (Model{InPlace: true}).Run(ctx, plan, out); err != nil {
			return nil, err
		}
		tc = append(tc, since(t))
		t = time.Now()
		var sum uint64
		for i := 0; i+8 <= len(buf); i += 8 {
			sum += binary.LittleEndian.Uint64(buf[i:])
		}
		tr = append(tr, since(t))
		_ = sum
		t = time.Now()
		copy(dst, buf)
		tcp = append(tcp, since(t))
	}
	res.ChecksumSeconds, res.ReadSeconds, res.CopySeconds = Median(tc), Median(tr), Median(tcp)
	for _, b := range BenchSampleBlocks(blocks) {
		r := BenchSampleRanges(c, b)
		sample := append(slices.Clone(buf[r[0]:r[0]+benchHalf]), buf[r[1]:r[1]+benchHalf]...)
		if want := BenchCheck(sample, b); out[b] != want {
			return nil, fmt.Errorf("bench: block %d: the kernel says %#x, the host %#x", b, out[b], want)
		}
		res.VerifiedRows++
	}
	return res, nil
}

func benchWithShape(blocks int) *layout.LayerView {
	c, _ := BenchCache(int64(blocks) * BenchSampleBytes)
	return c
}
