package cudabackend

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// groupBackends opens a Backend on each of the first n GPUs (closed when the test ends),
// with kernels from the default cubin cache.
func groupBackends(t *testing.T, n int) []*Backend {
	t.Helper()
	var bes []*Backend
	for o := range n {
		b, err := NewBackend(BackendOptions{Ordinal: o})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("close backend %d: %v", o, err)
			}
		})
		bes = append(bes, b)
	}
	return bes
}

// newGroup makes the NCCL group of bes, or skips the test when libnccl is absent (unless
// KVASIR_REQUIRE_NCCL=1, which scripts/gpu_test.sh sets when it found the library).
func newGroup(t *testing.T, bes []*Backend) []backend.Communicator {
	t.Helper()
	members := make([]backend.Backend, len(bes))
	for i, b := range bes {
		members[i] = b
	}
	comms, err := bes[0].NewGroup(members)
	if err != nil {
		if strings.Contains(err.Error(), "not found") && os.Getenv("KVASIR_REQUIRE_NCCL") != "1" {
			t.Skipf("skipping NCCL test: %v", err)
		}
		t.Fatal(err)
	}
	if len(comms) != len(bes) {
		t.Fatalf("NewGroup returned %d communicators for %d members", len(comms), len(bes))
	}
	return comms
}

// putF32 allocates a backend tensor [rows][cols] holding vals (inside no Run).
func putF32(t *testing.T, b *Backend, rows, cols int, vals []float32) backend.Tensor {
	t.Helper()
	var x backend.Tensor
	err := b.Run(func() error {
		var err error
		if x, err = b.NewTensor(quant.F32, rows, cols); err != nil {
			return err
		}
		return cuda.Upload(b.dev, x.(*tensor).buf, vals)
	})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// getF32 reads a backend F32 tensor back.
func getF32(t *testing.T, b *Backend, x backend.Tensor) []float32 {
	t.Helper()
	buf := x.(*tensor).buf
	v := make([]float32, buf.Len)
	if err := b.Run(func() error { return cuda.Download(b.dev, v, buf) }); err != nil {
		t.Fatal(err)
	}
	return v
}

// equalF32 fails the test unless got and want are bit for bit equal.
func equalF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}

// within runs fn and fails the test if it takes longer than d (a hang).
func within(t *testing.T, what string, d time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s: still running after %v", what, d)
	}
}

func TestNCCLGroupOfOne(t *testing.T) {
	gpuDriver(t)
	be := groupBackends(t, 1)[0]
	comms := newGroup(t, []*Backend{be})
	c := comms[0]
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d of %d, want 0 of 1", c.Rank(), c.Size())
	}
	cc := c.(*Comm)
	result(t, "nccl", "version", fmt.Sprint(cc.Version()), "libnccl.so.2 through purego")
	r := rand.New(rand.NewPCG(7, 11))
	const rows, cols = 3, 200
	x0 := randVals(r, rows*cols, 1)
	x := putF32(t, be, rows, cols, x0)

	// All-reduce over one rank leaves the values as they are.
	if err := be.Run(func() error { return c.AllReduceSum(x) }); err != nil {
		t.Fatal(err)
	}
	equalF32(t, "all-reduce of one rank", getF32(t, be, x), x0)

	// Send to and receive from itself, launched together.
	y := putF32(t, be, rows, cols, make([]float32, rows*cols))
	err := be.Run(func() error {
		return cc.Group(func() error { return firstErr(c.Send(x, 0), c.Recv(y, 0)) })
	})
	if err != nil {
		t.Fatal(err)
	}
	equalF32(t, "send/recv to self", getF32(t, be, y), x0)

	// Bad calls are refused.
	if err := be.Run(func() error { return c.Send(x, 1) }); err == nil {
		t.Error("send to rank 1 of a group of one succeeded")
	}

	// The all-reduce captured in a decode graph: step 1 runs eagerly, step 2 is captured
	// and launched, step 3 replays. Each adds the bias then all-reduces.
	bias0 := randVals(r, cols, 1)
	var bias backend.Tensor
	err = be.Run(func() error {
		var err error
		if bias, err = be.NewTensor(quant.F32, cols); err != nil {
			return err
		}
		return cuda.Upload(be.dev, bias.(*tensor).buf, bias0)
	})
	if err != nil {
		t.Fatal(err)
	}
	meta := &backend.StepMeta{Tokens: []int32{0}, Positions: []int32{0}, SlotMapping: []int32{0},
		QueryStarts: []int32{0, 1}, ContextLens: []int32{1}, BlockTables: []int32{0}, MaxBlocks: 1,
		MaxQueryLen: 1, MaxContextLen: 1, LogitsIndices: []int32{0}}
	want := append([]float32(nil), x0...)
	for step := range 3 {
		err := be.Run(func() error {
			st, err := be.UploadStep(meta)
			if err != nil {
				return err
			}
			return be.RunStep(st, "nccl-test", func() error {
				return firstErr(be.AddBias(x, bias), c.AllReduceSum(x))
			})
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		for i := range want {
			want[i] += bias0[i%cols]
		}
		equalF32(t, fmt.Sprintf("step %d", step), getF32(t, be, x), want)
	}
	captured, failed, ferr := be.GraphStats()
	if captured != 1 || failed != 0 {
		t.Fatalf("graphs: %d captured, %d failed (%v); want the all-reduce step captured", captured, failed, ferr)
	}
	result(t, "nccl", "all-reduce in a decode graph", "ok", "captured once, replayed")

	within(t, "close", 30*time.Second, c.Close)
	if err := be.Run(func() error { return c.AllReduceSum(x) }); err == nil {
		t.Error("all-reduce after Close succeeded")
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}

	// Abort: a new group, a queued all-reduce, then Abort and Close must return, and later
	// calls and graph replays fail.
	c2 := newGroup(t, []*Backend{be})[0]
	for step := range 3 {
		err := be.Run(func() error {
			st, err := be.UploadStep(meta)
			if err != nil {
				return err
			}
			return be.RunStep(st, "nccl-abort", func() error { return c2.AllReduceSum(x) })
		})
		if err != nil {
			t.Fatalf("abort group, step %d: %v", step, err)
		}
	}
	within(t, "abort", 30*time.Second, func() error { c2.Abort(); return nil })
	err = be.Run(func() error { return c2.AllReduceSum(x) })
	if !errors.Is(err, errAborted) {
		t.Errorf("all-reduce after Abort: %v, want %v", err, errAborted)
	}
	err = be.Run(func() error {
		st, err := be.UploadStep(meta)
		if err != nil {
			return err
		}
		return be.RunStep(st, "nccl-abort", func() error { return nil })
	})
	if !errors.Is(err, errAborted) {
		t.Errorf("graph step after Abort: %v, want %v", err, errAborted)
	}
	within(t, "close after abort", 30*time.Second, c2.Close)
	// The backend works on after its group is gone.
	if err := be.Run(func() error { return be.AddBias(x, bias) }); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i] += bias0[i%cols]
	}
	equalF32(t, "add after the group closed", getF32(t, be, x), want)
}

func TestNCCLGroupSameGPU(t *testing.T) {
	gpuDriver(t)
	be := groupBackends(t, 1)[0]
	_, err := be.NewGroup([]backend.Backend{be, be})
	if err == nil || !strings.Contains(err.Error(), "both on GPU") {
		t.Fatalf("group of one GPU twice: %v, want an error naming the GPU", err)
	}
}

func TestNCCLGroupOfTwo(t *testing.T) {
	if _, n := gpuDriver(t); n < 2 {
		t.Skipf("skipping: %d GPU, the group needs 2", n)
	}
	bes := groupBackends(t, 2)
	comms := newGroup(t, bes)
	r := rand.New(rand.NewPCG(3, 5))
	const rows, cols = 4, 300
	vals := [][]float32{randVals(r, rows*cols, 1), randVals(r, rows*cols, 1)}
	sum := make([]float32, rows*cols)
	for i := range sum {
		sum[i] = vals[0][i] + vals[1][i]
	}
	xs := []backend.Tensor{putF32(t, bes[0], rows, cols, vals[0]), putF32(t, bes[1], rows, cols, vals[1])}
	recv := putF32(t, bes[1], rows, cols, make([]float32, rows*cols))
	// Each rank's calls come from its own goroutine, as the model's ranks make them.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for rank := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, c := bes[rank], comms[rank]
			errs[rank] = b.Run(func() error {
				if err := c.AllReduceSum(xs[rank]); err != nil {
					return err
				}
				if rank == 0 {
					return c.Send(xs[0], 1)
				}
				return c.Recv(recv, 0)
			})
		}()
	}
	wg.Wait()
	if err := firstErr(errs...); err != nil {
		t.Fatal(err)
	}
	for rank, b := range bes {
		equalF32(t, fmt.Sprintf("rank %d all-reduce", rank), getF32(t, b, xs[rank]), sum)
	}
	equalF32(t, "rank 1 recv", getF32(t, bes[1], recv), sum)
	result(t, "nccl", "all-reduce of 2 GPUs", "ok", "sums match")
	for rank, c := range comms {
		within(t, fmt.Sprintf("close rank %d", rank), 30*time.Second, c.Close)
	}
}
