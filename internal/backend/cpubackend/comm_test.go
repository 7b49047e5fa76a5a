package cpubackend

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/quant"
)

// newGroup makes n single-thread CPU backends and their group.
func newGroup(t *testing.T, n int) ([]*Backend, []backend.Communicator) {
	t.Helper()
	bes := make([]*Backend, n)
	members := make([]backend.Backend, n)
	for i := range bes {
		bes[i] = New(1)
		members[i] = bes[i]
		t.Cleanup(func() { bes[i].Close() })
	}
	comms, err := bes[0].NewGroup(members)
	if err != nil {
		t.Fatal(err)
	}
	return bes, comms
}

// f32 makes an F32 tensor holding v.
func f32(t *testing.T, be *Backend, v []float32) *tensor {
	t.Helper()
	x, err := be.NewTensor(quant.F32, len(v))
	if err != nil {
		t.Fatal(err)
	}
	copy(x.(*tensor).f32, v)
	return x.(*tensor)
}

// onRanks runs fn on every rank at once and returns their errors.
func onRanks(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	return errs
}

func TestAllReduceSumsInRankOrder(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		bes, comms := newGroup(t, n)
		const size = 257
		inputs := make([][]float32, n)
		tensors := make([]*tensor, n)
		for r := range n {
			inputs[r] = make([]float32, size)
			for i := range inputs[r] {
				inputs[r][i] = float32(r+1)*0.1 + float32(i)*1e-3*float32(1-2*(r%2))
			}
			tensors[r] = f32(t, bes[r], inputs[r])
		}
		for r, err := range onRanks(n, func(r int) error { return comms[r].AllReduceSum(tensors[r]) }) {
			if err != nil {
				t.Fatalf("size %d rank %d: %v", n, r, err)
			}
		}
		for i := range size {
			want := inputs[0][i]
			for r := 1; r < n; r++ {
				want += inputs[r][i]
			}
			for r := range n {
				if got := tensors[r].f32[i]; got != want {
					t.Fatalf("size %d rank %d element %d: %v, want %v", n, r, i, got, want)
				}
			}
		}
		if comms[n-1].Rank() != n-1 || comms[0].Size() != n {
			t.Fatalf("rank %d size %d", comms[n-1].Rank(), comms[0].Size())
		}
	}
}

func TestSendRecvInOrder(t *testing.T) {
	bes, comms := newGroup(t, 2)
	x := f32(t, bes[1], make([]float32, 3))
	for k := range 5 {
		src := f32(t, bes[0], []float32{float32(k), float32(k + 1), float32(k + 2)})
		if err := comms[0].Send(src, 1); err != nil {
			t.Fatal(err)
		}
		src.f32[0] = -1 // Send copied the values
	}
	for k := range 5 {
		if err := comms[1].Recv(x, 0); err != nil {
			t.Fatal(err)
		}
		if x.f32[0] != float32(k) || x.f32[2] != float32(k+2) {
			t.Fatalf("receive %d: %v", k, x.f32)
		}
	}
	short := f32(t, bes[1], make([]float32, 2))
	if err := comms[0].Send(x, 1); err != nil {
		t.Fatal(err)
	}
	if err := comms[1].Recv(short, 0); err == nil || !strings.Contains(err.Error(), "3 values") {
		t.Fatalf("a receive into a smaller tensor: %v", err)
	}
	if err := comms[0].Send(x, 2); err == nil {
		t.Fatal("a send to rank 2 of a group of 2 succeeded")
	}
}

func TestAbortReleasesWaitingRanks(t *testing.T) {
	bes, comms := newGroup(t, 3)
	x := f32(t, bes[1], make([]float32, 4))
	done := make(chan []error)
	go func() {
		done <- onRanks(2, func(r int) error {
			if r == 0 {
				return comms[1].Recv(x, 0) // nothing is ever sent
			}
			return comms[2].AllReduceSum(f32(t, bes[2], make([]float32, 4))) // rank 0 never comes
		})
	}()
	time.Sleep(10 * time.Millisecond)
	comms[0].Abort()
	select {
	case errs := <-done:
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "aborted") {
				t.Fatalf("waiter %d: %v, want the abort", i, err)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Abort did not release the waiting ranks")
	}
	if err := comms[0].Send(x, 1); err == nil {
		t.Fatal("a send after Abort succeeded")
	}
}

func TestNewGroupRefusesOtherBackends(t *testing.T) {
	be := New(1)
	defer be.Close()
	if _, err := be.NewGroup([]backend.Backend{be, nil}); err == nil {
		t.Fatal("a group with a nil member was made")
	}
	if _, err := be.NewGroup(nil); err == nil {
		t.Fatal("an empty group was made")
	}
}
