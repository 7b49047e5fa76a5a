package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// poolSpin is how long an idle worker keeps polling for the next loop before it blocks on
// its channel: the ops of a forward step follow each other within microseconds, and a
// worker that is still awake joins the next loop without a futex wake-up.
const poolSpin = 250 * time.Microsecond

// Pool is a fixed set of worker goroutines that run data-parallel loops. The goroutines are
// started once by NewPool; Run hands them work and allocates nothing. A worker that has
// just finished a loop polls for the next one for a short while (poolSpin) before it
// sleeps on its channel, from which Run wakes it. The calling goroutine takes part in every Run, so a Pool of n threads starts n-1
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
	asleep []atomic.Bool  // asleep[i]: worker i blocks (or is about to) on wake[i]
	gen    atomic.Uint64  // counts the loops handed to the workers
	busy   atomic.Int32   // workers still running the current loop
	wg     sync.WaitGroup // the same workers, for a blocking wait
	closed bool

	// The loop being run; written under mu before the workers are woken.
	fn    func(start, end int)
	n     int
	chunk int
	next  atomic.Int64

	scratchMu sync.Mutex // guards scratch and mv: MatMul's few-token path
	scratch   []byte     // its quantized activations (Q8_0 or Q8_K)
	mv        matVec     // its product in progress

	attnMu      sync.Mutex // guards attnScratch, the split-K partial results of Attention
	attnScratch []float32
	attnStates  attnStates // the work states of Attention's parallel loops, reused

	gemm  gemmScratch  // the buffers of MatMul's many-token path (gemm.go)
	q0    q0Product    // the buffers of MatMul's Q8_0/Q4_0 path (matmul_q0.go)
	fused fusedScratch // MatMulSwiGLU's buffers for types without a fused path
	lora  loraScratch  // LoRAMatMul's token order (lora.go)
}

// NewPool starts a pool of threads workers (threads < 1 means runtime.GOMAXPROCS(0)) on
// the fastest kernel set this CPU supports.
func NewPool(threads int) *Pool {
	return newPoolWith(threads, allKernels()[0])
}

// NewPoolKernels is NewPool with the kernel set named kernelSet, as KernelSets lists them
// ("" for the fastest, "generic" for the pure-Go kernels).
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
	p.asleep = make([]atomic.Bool, threads-1)
	for i := range p.wake {
		p.wake[i] = make(chan struct{}, 1)
		go p.worker(i)
	}
	return p
}

// Threads returns the number of threads the pool runs loops on.
func (p *Pool) Threads() int { return p.threads }

// KernelSet returns the name of the kernel set the pool's operations use ("avx512", "avx2",
// "generic").
func (p *Pool) KernelSet() string { return p.kern.name }

// worker runs every loop handed out, in order of p.gen: it polls p.gen for poolSpin after
// each loop, then declares itself asleep and blocks on its channel until Run wakes it. The
// asleep flag settles who acts: Run sends a wake-up only when it clears a set flag, and a
// worker that clears its own flag (it saw the loop after all) takes no wake-up. A wake-up
// that finds no new loop came late, for a loop the worker already ran, and is ignored.
func (p *Pool) worker(i int) {
	wake, asleep := p.wake[i], &p.asleep[i]
	var seen uint64
	for {
		if !p.poll(seen) {
			asleep.Store(true)
			if p.gen.Load() == seen || !asleep.CompareAndSwap(true, false) {
				// Nothing yet, or Run cleared the flag and sends a wake-up.
				if _, ok := <-wake; !ok {
					return
				}
				if p.gen.Load() == seen {
					// A late wake-up: Run was delayed between handing out its loop and
					// waking this worker, which meanwhile ran the loop and slept again.
					continue
				}
			}
		}
		seen++
		p.work()
		p.busy.Add(-1)
		p.wg.Done()
	}
}

// poll reports whether a loop after the seen-th appears within poolSpin.
func (p *Pool) poll(seen uint64) bool {
	return p.spinUntil(func() bool { return p.gen.Load() != seen })
}

// spinUntil polls cond for up to poolSpin, yielding the processor now and then, and
// reports whether it became true.
func (p *Pool) spinUntil(cond func() bool) bool {
	var deadline time.Time
	for i := 0; ; i++ {
		if cond() {
			return true
		}
		if i%64 == 63 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(poolSpin)
			} else if now.After(deadline) {
				return false
			}
			runtime.Gosched()
		}
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
	p.fn, p.n, p.chunk = fn, n, chunk
	p.next.Store(0)
	// Every worker takes part in every loop (one with no chunk left returns at once), so
	// that each sees the loops in order.
	p.wg.Add(len(p.wake))
	p.busy.Store(int32(len(p.wake)))
	p.gen.Add(1)
	for i := range p.wake {
		if p.asleep[i].CompareAndSwap(true, false) {
			p.wake[i] <- struct{}{}
		}
	}
	p.work()
	// The workers are usually a few microseconds from done: poll before blocking, so that
	// the caller is not parked and woken again at the end of every loop.
	p.spinUntil(func() bool { return p.busy.Load() == 0 })
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
