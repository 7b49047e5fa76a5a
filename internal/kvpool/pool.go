package kvpool

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// Defaults of Config.
const (
	DefaultTimeout       = time.Second
	DefaultLookupTimeout = 10 * time.Second
	DefaultWriteQueue    = 256 << 20
	// batchBytes bounds the keys and values one MGET or one write pipeline carries, so
	// that each call's deadline covers a bounded transfer (2 MiB in a second: a slow
	// link still makes it), and a lookup cut short keeps the blocks that came before.
	batchBytes = 2 << 20
	// breakerThreshold failures in a row open the breaker for breakerCooldown.
	breakerThreshold = 3
	breakerCooldown  = 5 * time.Second
	// writeSlack stretches a write's deadline over a read's.
	writeSlack = 4
)

// Config configures a Pool.
type Config struct {
	// URL is the Redis server of the shared pool, redis://[user:password@]host:port[/db]
	// ("": no shared pool, only the host tier).
	URL string
	// Namespace names the model and the block layout: only instances with the same one
	// share blocks (see the package documentation).
	Namespace string
	// BlockBytes is the size of one block's keys and values (model.KVCache.BlockBytes).
	BlockBytes int
	// OffloadBytes is the host tier's budget in bytes (0: no host tier).
	OffloadBytes int64
	// Timeout bounds every call to Redis: connecting, one MGET, one write pipeline
	// (0: DefaultTimeout).
	Timeout time.Duration
	// LookupTimeout bounds one Lookup in all (0: DefaultLookupTimeout).
	LookupTimeout time.Duration
	// WriteQueue bounds the bytes of blocks waiting to be written; Save drops what does
	// not fit (0: DefaultWriteQueue).
	WriteQueue int64
	// Log receives the pool's warnings (nil: slog.Default()).
	Log *slog.Logger
}

// Stats are a Pool's counters since it was made, and the host tier's size.
type Stats struct {
	// Hits and Misses count blocks looked up in Redis (after the host tier): found, and
	// not found or not asked (a lookup stops at the first miss, and the rest count too).
	Hits, Misses int64
	// ReadBytes and WrittenBytes count the values read from and written to Redis.
	ReadBytes, WrittenBytes int64
	// Errors counts failed or timed-out Redis calls, and calls the open breaker refused.
	Errors int64
	// Corrupt counts values that failed their checks (and were recomputed).
	Corrupt int64
	// DroppedWrites counts blocks Save dropped: the write queue was full or Redis down.
	DroppedWrites int64
	// Up reports whether Redis is being called (the breaker is closed); false also when
	// there is no shared pool.
	Up bool
	// OffloadHits and OffloadMisses count blocks looked up in the host tier.
	OffloadHits, OffloadMisses int64
	// OffloadBlocks and OffloadBytes are what the host tier holds now.
	OffloadBlocks int
	OffloadBytes  int64
}

// Pool is the store of KV blocks beyond an engine's cache: a host tier and a shared Redis
// pool, either of them optional. It is safe for concurrent use.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	mem    *memoryTier   // nil: no host tier
	client *redis.Client // nil: no shared pool
	br     *breaker

	writes  chan writeOrder
	queued  atomic.Int64 // bytes in writes
	pending atomic.Int64 // orders enqueued and not yet carried out (deletions included)
	stop    chan struct{}
	stopped chan struct{}
	closed  sync.Once

	hits, misses, readBytes, writtenBytes atomic.Int64
	errs, corrupt, dropped                atomic.Int64
	memHits, memMisses                    atomic.Int64
}

// writeOrder is blocks to write to Redis (Save), or a corrupt value's key to delete.
type writeOrder struct {
	refs []kvcache.BlockRef
	kv   []byte
	del  string
}

// CheckURL checks a Redis URL, redis://[user:password@]host:port[/db] (or rediss:// for
// TLS), without connecting.
func CheckURL(url string) error {
	if _, err := redis.ParseURL(url); err != nil {
		return fmt.Errorf("%q: %w", url, err)
	}
	return nil
}

// quietClient silences go-redis's own logging (process-wide): a pool's failures are its
// warnings and counters, not a line per failed dial.
var quietClient sync.Once

// New makes a pool. It does not connect: the first call to Redis does, and a server that
// is down only makes the pool miss.
func New(cfg Config) (*Pool, error) {
	if cfg.BlockBytes <= 0 {
		return nil, fmt.Errorf("kv pool: block of %d bytes", cfg.BlockBytes)
	}
	if cfg.OffloadBytes < 0 {
		return nil, fmt.Errorf("kv pool: host tier of %d bytes", cfg.OffloadBytes)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	if cfg.WriteQueue <= 0 {
		cfg.WriteQueue = DefaultWriteQueue
	}
	p := &Pool{cfg: cfg, log: cfg.Log, br: &breaker{threshold: breakerThreshold, cooldown: breakerCooldown, now: time.Now}}
	if p.log == nil {
		p.log = slog.Default()
	}
	if cfg.OffloadBytes > 0 {
		p.mem = newMemoryTier(cfg.OffloadBytes)
	}
	if cfg.URL != "" {
		opt, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("kv pool %q: %w", cfg.URL, err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout, cfg.Timeout
		opt.ContextTimeoutEnabled = true
		opt.MaxRetries = -1 // a failed call is a miss; the breaker decides when to try again
		opt.DialerRetries = 1
		opt.DisableIdentity = true
		opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		quietClient.Do(func() { redis.SetLogger(&logging.VoidLogger{}) })
		p.client = redis.NewClient(opt)
		p.writes = make(chan writeOrder, 4096)
		p.stop, p.stopped = make(chan struct{}), make(chan struct{})
		go p.writer()
	}
	return p, nil
}

// Shared reports whether the pool has a Redis server (Save does something).
func (p *Pool) Shared() bool { return p.client != nil }

// Offloads reports whether the pool has a host tier (Offload does something).
func (p *Pool) Offloads() bool { return p.mem != nil }

// Key is the Redis key of the block with hash h.
func (p *Pool) Key(h kvcache.BlockHash) string {
	return "kvasir:kv:" + p.cfg.Namespace + ":" + hex.EncodeToString(h[:])
}

// Lookup returns the keys and values of the longest run of refs' leading blocks the pool
// holds: the host tier first, then Redis for the rest. A block is BlockBytes; the caller
// only reads them. It never fails: a tier that is down or slow just misses.
func (p *Pool) Lookup(ctx context.Context, refs []kvcache.BlockRef) [][]byte {
	var out [][]byte
	if p.mem != nil {
		for _, r := range refs {
			kv := p.mem.get(r.Hash)
			if kv == nil {
				break
			}
			out = append(out, kv)
		}
		p.memHits.Add(int64(len(out)))
		p.memMisses.Add(int64(len(refs) - len(out)))
	}
	if p.client == nil || len(out) == len(refs) {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.LookupTimeout)
	defer cancel()
	rest := refs[len(out):]
	found := 0
	defer func() {
		p.hits.Add(int64(found))
		p.misses.Add(int64(len(rest) - found))
	}()
	per := max(1, batchBytes/p.cfg.BlockBytes)
	for start := 0; start < len(rest); start += per {
		batch := rest[start:min(len(rest), start+per)]
		vals, err := p.mget(ctx, batch)
		if err != nil {
			return out
		}
		for i, v := range vals {
			if v == nil {
				return out
			}
			kv, err := decodeValue(v, batch[i], p.cfg.BlockBytes)
			if err != nil {
				p.corrupt.Add(1)
				p.log.Warn("kv pool: ignoring a stored block, recomputing it", "key", p.Key(batch[i].Hash), "err", err)
				p.enqueue(writeOrder{del: p.Key(batch[i].Hash)})
				return out
			}
			p.readBytes.Add(int64(len(v)))
			out = append(out, kv)
			found++
		}
	}
	return out
}

// mget reads the values of refs' keys (nil for a missing key) in one call.
func (p *Pool) mget(ctx context.Context, refs []kvcache.BlockRef) ([][]byte, error) {
	if !p.br.allow() {
		p.errs.Add(1)
		return nil, errors.New("breaker open")
	}
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = p.Key(r.Hash)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	res, err := p.client.MGet(ctx, keys...).Result()
	p.record(err)
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, len(res))
	for i, v := range res {
		if s, ok := v.(string); ok {
			vals[i] = []byte(s)
		}
	}
	return vals, nil
}

// record feeds a call's outcome to the breaker, counts a failure, and logs the breaker
// opening and closing.
func (p *Pool) record(err error) {
	opened, closed := p.br.done(err)
	if err != nil {
		p.errs.Add(1)
	}
	switch {
	case opened:
		p.log.Warn("kv pool: redis failing, serving without the pool", "url", p.cfg.URL, "retry_in", p.br.cooldown, "err", err)
	case closed:
		p.log.Info("kv pool: redis back, using the pool again", "url", p.cfg.URL)
	}
}

// Save offers blocks the engine computed to the shared pool: refs name them and kv holds
// their keys and values, BlockBytes each, in order; the pool owns kv from now on. It never
// blocks: the blocks are written by a goroutine of the pool, or dropped (and counted) when
// its queue is full, Redis is down, or there is no shared pool.
func (p *Pool) Save(refs []kvcache.BlockRef, kv []byte) {
	if p.client == nil || len(refs) == 0 {
		return
	}
	if len(kv) != len(refs)*p.cfg.BlockBytes {
		p.dropped.Add(int64(len(refs)))
		return
	}
	if p.br.isOpen() || p.queued.Load()+int64(len(kv)) > p.cfg.WriteQueue || !p.enqueue(writeOrder{refs: refs, kv: kv}) {
		p.dropped.Add(int64(len(refs)))
	}
}

// enqueue hands an order to the writer unless its queue is full or the pool is closing.
func (p *Pool) enqueue(o writeOrder) bool {
	select {
	case <-p.stop:
		return false
	default:
	}
	p.queued.Add(int64(len(o.kv)))
	p.pending.Add(1)
	select {
	case p.writes <- o:
		return true
	default:
		p.queued.Add(-int64(len(o.kv)))
		p.pending.Add(-1)
		return false
	}
}

// writer is the pool's write goroutine: it sends each order to Redis in pipelines of at
// most batchBytes, each under the call timeout, until Close.
func (p *Pool) writer() {
	defer close(p.stopped)
	for {
		select {
		case o := <-p.writes:
			p.write(o)
		case <-p.stop:
			return
		}
	}
}

// write carries out one order.
func (p *Pool) write(o writeOrder) {
	defer p.pending.Add(-1)
	defer p.queued.Add(-int64(len(o.kv)))
	if o.del != "" {
		if p.br.allow() {
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Timeout)
			p.record(p.client.Del(ctx, o.del).Err())
			cancel()
		}
		return
	}
	bb := p.cfg.BlockBytes
	per := max(1, batchBytes/bb)
	for start := 0; start < len(o.refs); start += per {
		end := min(len(o.refs), start+per)
		if !p.br.allow() {
			p.errs.Add(1)
			p.dropped.Add(int64(len(o.refs) - start))
			return
		}
		// Nobody waits for a write: it gets writeSlack times a read's deadline.
		ctx, cancel := context.WithTimeout(context.Background(), writeSlack*p.cfg.Timeout)
		pipe := p.client.Pipeline()
		n := 0
		for i := start; i < end; i++ {
			v := encodeValue(o.refs[i], o.kv[i*bb:(i+1)*bb])
			n += len(v)
			// NX: the first copy of a block stays (a later one holds the same tokens'
			// keys and values, perhaps off by rounding on another backend).
			pipe.SetNX(ctx, p.Key(o.refs[i].Hash), v, 0)
		}
		_, err := pipe.Exec(ctx)
		cancel()
		p.record(err)
		if err != nil {
			p.dropped.Add(int64(end - start)) // the next batch asks the breaker again
			continue
		}
		p.writtenBytes.Add(int64(n))
	}
}

// Offload keeps a block the engine's cache evicted in the host tier: hash names it, kv
// (BlockBytes, owned by the pool from now on) holds its keys and values.
func (p *Pool) Offload(hash kvcache.BlockHash, kv []byte) {
	if p.mem != nil && len(kv) == p.cfg.BlockBytes {
		p.mem.put(hash, kv)
	}
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	s := Stats{
		Hits: p.hits.Load(), Misses: p.misses.Load(), ReadBytes: p.readBytes.Load(), WrittenBytes: p.writtenBytes.Load(),
		Errors: p.errs.Load(), Corrupt: p.corrupt.Load(), DroppedWrites: p.dropped.Load(),
		Up:          p.client != nil && !p.br.isOpen(),
		OffloadHits: p.memHits.Load(), OffloadMisses: p.memMisses.Load(),
	}
	if p.mem != nil {
		s.OffloadBlocks, s.OffloadBytes = p.mem.size()
	}
	return s
}

// Flush waits until the writes queued so far are done or dropped, or ctx ends (tests and
// benchmarks: a second instance then finds what the first saved).
func (p *Pool) Flush(ctx context.Context) error {
	for p.client != nil && p.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// Close stops the writer (dropping the writes still queued) and closes the connections.
func (p *Pool) Close() error {
	var err error
	p.closed.Do(func() {
		if p.client == nil {
			return
		}
		close(p.stop)
		<-p.stopped
		err = p.client.Close()
	})
	return err
}
