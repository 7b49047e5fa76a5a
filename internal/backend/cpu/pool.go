package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that run data-parallel loops. The goroutines are
// started once by NewPool; Run hands them work through per-worker channels and allocates
// nothing. The calling goroutine takes part in every Run, so a Pool of n threads starts n-1
// goroutines.
//
// A Pool also carries the kernel set (AVX2, generic, ...) its operations use, chosen when
// the Pool is made. Run calls are serialized: a Pool runs one loop at a time, and fn must not
// call Run on the same Pool (that would deadlock).
type Pool struct {
	threads int
	kern    *kernels

	mu     sync.Mutex // serializes Run
	wake   []chan struct{}
	wg     sync.WaitGroup
	closed bool

	// The loop being run; written under mu before the workers are woken.
	fn    func(start, end int)
	n     int
	chunk int
	next  atomic.Int64

	scratchMu sync.Mutex // guards scratch, the quantized activations of MatMul's few-token path
	scratch   []byte

	attnMu      sync.Mutex // guards attnScratch, the split-K partial results of Attention
	attnScratch []float32

	gemm gemmScratch // the buffers of MatMul's many-token path (gemm.go)
}

// NewPool starts a pool of threads workers (threads < 1 means runtime.GOMAXPROCS(0)). It
// uses the fastest kernel set this CPU supports, or the pure-Go one when the environment
// variable KVASIR_CPU is "generic".
func NewPool(threads int) *Pool {
	return newPoolWith(threads, defaultKernels())
}

// NewPoolKernels is NewPool with an explicit kernel set, named as KernelSets lists them.
func NewPoolKernels(threads int, kernelSet string) (*Pool, error) {
	k, err := kernelsByName(kernelSet)
	if err != nil {
		return nil, err
	}
	return newPoolWith(threads, k), nil
}

func newPoolWith(threads int, k *kernels) *Pool {
	if threads < 1 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Pool{threads: threads, kern: k}
	p.wake = make([]chan struct{}, threads-1)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		go p.worker(p.wake[i])
	}
	return p
}

// Threads returns the number of threads the pool runs loops on.
func (p *Pool) Threads() int { return p.threads }

// KernelSet returns the name of the kernel set the pool's operations use ("avx2", "generic").
func (p *Pool) KernelSet() string { return p.kern.name }

func (p *Pool) worker(wake chan struct{}) {
	for range wake {
		p.work()
		p.wg.Done()
	}
}

// work claims chunks of the current loop until none is left.
func (p *Pool) work() {
	n, chunk := int64(p.n), int64(p.chunk)
	for {
		start := p.next.Add(chunk) - chunk
		if start >= n {
			return
		}
		p.fn(int(start), int(min(start+chunk, n)))
	}
}

// Run calls fn over disjoint ranges [start, end) that together cover [0, n), in parallel on
// the pool's threads, and returns when all calls are done. Ranges are claimed dynamically in
// chunks of about n/(4*threads) so that uneven progress balances out.
func (p *Pool) Run(n int, fn func(start, end int)) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.threads == 1 || n == 1 || p.closed {
		fn(0, n)
		return
	}
	chunk := (n + 4*p.threads - 1) / (4 * p.threads)
	chunks := (n + chunk - 1) / chunk
	helpers := min(len(p.wake), chunks-1)
	p.fn, p.n, p.chunk = fn, n, chunk
	p.next.Store(0)
	p.wg.Add(helpers)
	for i := range helpers {
		p.wake[i] <- struct{}{}
	}
	p.work()
	p.wg.Wait()
	p.fn = nil
}

// Close stops the worker goroutines. Run still works after Close, on the calling goroutine
// alone. Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, c := range p.wake {
		close(c)
	}
}
