package cudabackend

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvasir-llm/kvasir/internal/backend"
	"github.com/kvasir-llm/kvasir/internal/backend/cuda"
)

// errAborted is returned by a Communicator's calls once its group was aborted.
var errAborted = errors.New("cuda nccl: the communicator group was aborted")

// commGroup is the state the members of one NCCL group share: the library, each rank's
// communicator handle, and whether the group was aborted.
type commGroup struct {
	lib     *cuda.NCCL
	aborted atomic.Bool

	mu    sync.Mutex // guards comms: a handle is taken (zeroed) by whoever frees it
	comms []uintptr
}

// Comm is one rank of an NCCL group made by Backend.NewGroup: a backend.Communicator whose
// data calls are queued on the rank backend's stream (and so may be captured in its decode
// graphs). Ranks of one group live on distinct GPUs; each rank's calls are made from its
// own goroutine (inside its backend's Run), since a collective's first call waits for the
// other ranks' calls to connect.
type Comm struct {
	g    *commGroup
	be   *Backend
	rank int
	comm uintptr // the rank's ncclComm_t; valid until Close or Abort

	closed atomic.Bool
}

// NewGroup makes an NCCL group of len(members) ranks, members[i] (a *Backend, each on a
// different GPU) being rank i, with ncclCommInitAll on the first member's device
// goroutine, and returns the ranks' Communicators (*Comm) in rank order. Without libnccl it
// returns an error saying so ("cuda: NCCL (libnccl.so.2) not found: ..."). It is called
// outside Run.
func (b *Backend) NewGroup(members []backend.Backend) ([]backend.Communicator, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("cuda nccl: group of no members")
	}
	bes := make([]*Backend, len(members))
	devs := make([]int32, len(members))
	seen := map[int]int{}
	for i, m := range members {
		cb, ok := m.(*Backend)
		if !ok || cb == nil {
			return nil, fmt.Errorf("cuda nccl: member %d is a %T, not a CUDA backend", i, m)
		}
		o := cb.dev.Info().Ordinal
		if j, dup := seen[o]; dup {
			return nil, fmt.Errorf("cuda nccl: members %d and %d are both on GPU %d; NCCL needs one GPU per rank", j, i, o)
		}
		seen[o] = i
		bes[i], devs[i] = cb, int32(o)
	}
	lib, err := cuda.OpenNCCL()
	if err != nil {
		return nil, err
	}
	g := &commGroup{lib: lib, comms: make([]uintptr, len(members))}
	first := bes[0].dev
	err = first.Do(func() error { return lib.InitAll(first, g.comms, devs) })
	if err != nil {
		return nil, fmt.Errorf("cuda nccl: group of GPUs %v: %w", devs, err)
	}
	out := make([]backend.Communicator, len(members))
	for i, cb := range bes {
		c := &Comm{g: g, be: cb, rank: i, comm: g.comms[i]}
		// The backend refuses to replay graphs once one of its groups is aborted.
		if err := cb.dev.Do(func() error { cb.groups = append(cb.groups, g); return nil }); err != nil {
			g.abort()
			return nil, fmt.Errorf("cuda nccl: rank %d: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// Rank returns this member's index in the group.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in the group.
func (c *Comm) Size() int { return len(c.g.comms) }

// Version returns the NCCL version code the group runs on, e.g. 22703.
func (c *Comm) Version() int { return c.g.lib.Version }

// buffer checks that the group is live and t is a tensor of an NCCL data type, and returns
// its buffer (inside Run).
func (c *Comm) buffer(op string, t backend.Tensor) (cuda.Buffer, error) {
	if c.g.aborted.Load() {
		return cuda.Buffer{}, fmt.Errorf("cuda nccl %s: %w", op, errAborted)
	}
	if c.closed.Load() {
		return cuda.Buffer{}, fmt.Errorf("cuda nccl %s: rank %d is closed", op, c.rank)
	}
	x, err := devTensor("nccl "+op, "t", t, cuda.F32, cuda.F16, cuda.BF16, cuda.I32)
	if err != nil {
		return cuda.Buffer{}, err
	}
	return x.buf, nil
}

// peerOK checks a peer rank.
func (c *Comm) peerOK(op string, peer int) error {
	if peer < 0 || peer >= c.Size() {
		return fmt.Errorf("cuda nccl %s: peer %d outside the group's %d ranks", op, peer, c.Size())
	}
	return nil
}

// AllReduceSum queues an in-place ncclAllReduce (sum, in t's dtype) of t on the rank's
// stream (inside the rank backend's Run).
func (c *Comm) AllReduceSum(t backend.Tensor) error {
	buf, err := c.buffer("all-reduce", t)
	if err != nil {
		return err
	}
	if err := c.g.lib.AllReduceSum(c.be.dev, buf, c.comm); err != nil {
		return fmt.Errorf("cuda nccl all-reduce of %d %s on rank %d: %w", buf.Len, buf.DType, c.rank, err)
	}
	return nil
}

// Send queues an ncclSend of t to rank peer on the rank's stream (inside Run). Between two
// ranks it returns once queued; a send to the rank itself must be paired with its Recv
// inside one Group call.
func (c *Comm) Send(t backend.Tensor, peer int) error {
	buf, err := c.buffer("send", t)
	if err != nil {
		return err
	}
	if err := c.peerOK("send", peer); err != nil {
		return err
	}
	if err := c.g.lib.Send(c.be.dev, buf, peer, c.comm); err != nil {
		return fmt.Errorf("cuda nccl send of %d %s from rank %d to %d: %w", buf.Len, buf.DType, c.rank, peer, err)
	}
	return nil
}

// Recv queues an ncclRecv into t from rank peer on the rank's stream (inside Run).
func (c *Comm) Recv(t backend.Tensor, peer int) error {
	buf, err := c.buffer("recv", t)
	if err != nil {
		return err
	}
	if err := c.peerOK("recv", peer); err != nil {
		return err
	}
	if err := c.g.lib.Recv(c.be.dev, buf, peer, c.comm); err != nil {
		return fmt.Errorf("cuda nccl recv of %d %s on rank %d from %d: %w", buf.Len, buf.DType, c.rank, peer, err)
	}
	return nil
}

// Group runs fn, which makes several of this rank's calls, between ncclGroupStart and
// ncclGroupEnd, so that NCCL launches them together: a send to and a receive from the
// same rank (the rank itself included) then cannot wait on each other (inside Run).
func (c *Comm) Group(fn func() error) error {
	if c.g.aborted.Load() {
		return fmt.Errorf("cuda nccl group: %w", errAborted)
	}
	if c.closed.Load() {
		return fmt.Errorf("cuda nccl group: rank %d is closed", c.rank)
	}
	if err := c.g.lib.GroupStart(c.comm); err != nil {
		return err
	}
	ferr := fn()
	eerr := c.g.lib.GroupEnd(c.comm)
	return firstErr(ferr, eerr)
}

// Abort breaks the whole group: it marks it aborted, so that every later call of any rank
// (and the replay of a graph of a rank's backend) returns an error, and calls
// ncclCommAbort on every rank's communicator not yet closed, which ends NCCL work pending
// on the GPUs. It may be called from any goroutine, also inside a rank's Run.
func (c *Comm) Abort() { c.g.abort() }

// abort marks the group aborted and aborts the communicators not yet closed.
func (g *commGroup) abort() {
	g.aborted.Store(true)
	g.mu.Lock()
	live := make([]uintptr, 0, len(g.comms))
	for i, h := range g.comms {
		if h != 0 {
			live = append(live, h)
			g.comms[i] = 0
		}
	}
	g.mu.Unlock()
	for _, h := range live {
		g.lib.Abort(h)
	}
}

// Close destroys this rank's communicator (ncclCommDestroy) on its device goroutine, after
// dropping the backend's captured graphs, which may hold the communicator's work. After
// Abort it only forgets the group. Close is called outside Run; a second Close does
// nothing.
func (c *Comm) Close() error {
	c.closed.Store(true)
	c.g.mu.Lock()
	h := c.g.comms[c.rank]
	c.g.comms[c.rank] = 0
	c.g.mu.Unlock()
	be, g := c.be, c.g
	return be.dev.Do(func() error {
		for i, x := range be.groups {
			if x == g {
				be.groups = append(be.groups[:i], be.groups[i+1:]...)
				break
			}
		}
		err := firstErr(be.dev.Sync(), be.dropGraphs())
		if h == 0 {
			return err
		}
		return firstErr(err, g.lib.Destroy(h))
	})
}

// groupsAborted reports whether a group the backend is a member of was aborted (inside
// Run).
func (b *Backend) groupsAborted() bool {
	for _, g := range b.groups {
		if g.aborted.Load() {
			return true
		}
	}
	return false
}

// Compile-time checks of the interfaces.
var (
	_ backend.Grouper      = (*Backend)(nil)
	_ backend.Communicator = (*Comm)(nil)
)
