package cpubackend

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvasir-llm/kvasir/internal/backend"
)

// errAborted is what a communicator's calls return once its group has been aborted.
var errAborted = errors.New("cpu communicator: the group was aborted")

// pipeDepth is how many Sends from one rank to another may wait to be received.
const pipeDepth = 16

// group is an in-process communicator group: its ranks are goroutines, each driving its
// own CPU backend, that exchange float32 rows over channels.
//
// An all-reduce gathers every rank's values at rank 0, which adds them in rank order (so
// the sum does not depend on arrival order) into its own tensor and hands that tensor to
// the others to copy; rank 0 waits for their copies before it returns, since its tensor is
// reused by the next op.
type group struct {
	size    int
	gather  []chan []float32 // rank r's values, to rank 0 (index 0 unused)
	result  []chan []float32 // the sum, from rank 0 to rank r
	copied  chan struct{}    // one per rank r > 0 that copied the sum
	pipes   [][]chan []float32
	parts   [][]float32 // rank 0's view of the ranks' values during an all-reduce
	aborted chan struct{}
	abort   sync.Once
}

// comm is one rank's member of a group.
type comm struct {
	g    *group
	rank int
}

// NewGroup makes an in-process group of len(members) CPU backends, members[i] being rank
// i (backend.Grouper).
func (b *Backend) NewGroup(members []backend.Backend) ([]backend.Communicator, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("cpu communicator: a group needs at least one member")
	}
	for i, m := range members {
		if _, ok := m.(*Backend); !ok {
			return nil, fmt.Errorf("cpu communicator: member %d is %T, not a CPU backend", i, m)
		}
	}
	n := len(members)
	g := &group{
		size:    n,
		gather:  make([]chan []float32, n),
		result:  make([]chan []float32, n),
		copied:  make(chan struct{}, n),
		pipes:   make([][]chan []float32, n),
		parts:   make([][]float32, n),
		aborted: make(chan struct{}),
	}
	for r := range n {
		g.gather[r] = make(chan []float32, 1)
		g.result[r] = make(chan []float32, 1)
		g.pipes[r] = make([]chan []float32, n)
		for p := range n {
			g.pipes[r][p] = make(chan []float32, pipeDepth)
		}
	}
	comms := make([]backend.Communicator, n)
	for r := range comms {
		comms[r] = &comm{g: g, rank: r}
	}
	return comms, nil
}

// Rank returns the member's rank.
func (c *comm) Rank() int { return c.rank }

// Size returns the group's size.
func (c *comm) Size() int { return c.g.size }

// AllReduceSum replaces t by the sum of every rank's t, added in rank order.
func (c *comm) AllReduceSum(t backend.Tensor) error {
	x, err := activation("all-reduce", "tensor", t)
	if err != nil {
		return err
	}
	g, v := c.g, x.f32
	if g.size == 1 {
		return nil
	}
	if c.rank != 0 {
		if err := g.send(g.gather[c.rank], v); err != nil {
			return err
		}
		sum, err := g.recv(g.result[c.rank])
		if err != nil {
			return err
		}
		copy(v, sum)
		select {
		case g.copied <- struct{}{}:
			return nil
		case <-g.aborted:
			return errAborted
		}
	}
	parts := g.parts
	for r := 1; r < g.size; r++ {
		if parts[r], err = g.recv(g.gather[r]); err != nil {
			return err
		}
		if len(parts[r]) != len(v) {
			g.Abort()
			return fmt.Errorf("cpu all-reduce: rank %d sent %d values, rank 0 has %d", r, len(parts[r]), len(v))
		}
	}
	for r := 1; r < g.size; r++ {
		for i, p := range parts[r] {
			v[i] += p
		}
	}
	for r := 1; r < g.size; r++ {
		if err := g.send(g.result[r], v); err != nil {
			return err
		}
	}
	for r := 1; r < g.size; r++ {
		if err := g.wait(g.copied); err != nil {
			return err
		}
	}
	return nil
}

// Send queues a copy of t's values for rank peer.
func (c *comm) Send(t backend.Tensor, peer int) error {
	x, err := activation("send", "tensor", t)
	if err != nil {
		return err
	}
	if peer < 0 || peer >= c.g.size {
		return fmt.Errorf("cpu send: peer %d outside a group of %d", peer, c.g.size)
	}
	return c.g.send(c.g.pipes[c.rank][peer], append([]float32(nil), x.f32...))
}

// Recv overwrites t with the values of the next Send from rank peer.
func (c *comm) Recv(t backend.Tensor, peer int) error {
	x, err := activation("recv", "tensor", t)
	if err != nil {
		return err
	}
	if peer < 0 || peer >= c.g.size {
		return fmt.Errorf("cpu recv: peer %d outside a group of %d", peer, c.g.size)
	}
	v, err := c.g.recv(c.g.pipes[peer][c.rank])
	if err != nil {
		return err
	}
	if len(v) != len(x.f32) {
		c.g.Abort()
		return fmt.Errorf("cpu recv: rank %d sent %d values into a tensor of %d", peer, len(v), len(x.f32))
	}
	copy(x.f32, v)
	return nil
}

// Abort breaks the group: every pending and later call returns an error.
func (c *comm) Abort() { c.g.Abort() }

// Close does nothing: the group holds no resources beyond memory.
func (c *comm) Close() error { return nil }

// Abort closes the group's abort channel once.
func (g *group) Abort() { g.abort.Do(func() { close(g.aborted) }) }

// send puts v on ch unless the group is aborted first.
func (g *group) send(ch chan []float32, v []float32) error {
	select {
	case <-g.aborted:
		return errAborted
	default:
	}
	select {
	case ch <- v:
		return nil
	case <-g.aborted:
		return errAborted
	}
}

// recv takes the next value from ch unless the group is aborted first.
func (g *group) recv(ch chan []float32) ([]float32, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-g.aborted:
		return nil, errAborted
	}
}

// wait takes one signal from ch unless the group is aborted first.
func (g *group) wait(ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-g.aborted:
		return errAborted
	}
}
