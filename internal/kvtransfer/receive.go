package kvtransfer

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// Defaults of ReceiverConfig.
const (
	DefaultMaxHeldBytes = 1 << 30
	DefaultTTL          = 30 * time.Second
	DefaultMaxDuration  = 10 * time.Minute
)

// ReceiverConfig configures a Receiver: the geometry transfers must have, and its bounds.
type ReceiverConfig struct {
	// Model, BlockSize, BlockBytes and Layers (a block's layers) are the receiving
	// engine's: a transfer naming others is refused.
	Model                         string
	BlockSize, BlockBytes, Layers int
	// KVCacheDType is the receiving cache's element type (Header.KVCacheDType): a
	// transfer of another is refused.
	KVCacheDType string
	// KVLayout is the receiving engine's block layout (Header.KVLayout,
	// kvasir.Engine.KVLayout): a transfer of another is refused.
	KVLayout string
	// MaxHeldBytes bounds the bytes of the transfers held at once, waiting for their
	// requests; one that would pass it is refused (0: DefaultMaxHeldBytes).
	MaxHeldBytes int64
	// TTL is how long a transfer is held for the request that takes it (0: DefaultTTL).
	TTL time.Duration
	// Timeout bounds each frame's read (keepalive frames included) and the
	// acknowledgement's write (0: DefaultTimeout): a sender that stalls longer loses its
	// transfer.
	Timeout time.Duration
	// MaxDuration bounds a whole transfer, however its sender keeps it alive (0:
	// DefaultMaxDuration).
	MaxDuration time.Duration
	// Logger receives one line per refused or failed transfer (nil: slog.Default()).
	Logger *slog.Logger
	// OnDone, when set, is called after every transfer with its error (nil: received and
	// held) and its block bytes; it must return quickly.
	OnDone func(err error, bytes int64)
}

// Received is a transfer held for its request: the chained hashes of its blocks and their
// bytes, block after block.
type Received struct {
	Hashes []kvcache.BlockHash
	Data   []byte
}

// ReceiverStats count a receiver's transfers.
type ReceiverStats struct {
	// Received transfers arrived intact and were acknowledged; Failed broke, stalled,
	// failed a checksum or were refused; Taken were taken by their requests; Expired
	// waited past the TTL for a request that never came.
	Received, Failed, Taken, Expired int64
	// Bytes counts the block bytes of the transfers received; HeldBytes those held now.
	Bytes, HeldBytes int64
}

// Receiver accepts transfers on a TCP listener and holds them until taken.
type Receiver struct {
	cfg ReceiverConfig
	log *slog.Logger
	ln  net.Listener
	wg  sync.WaitGroup

	mu     sync.Mutex
	held   map[string]*heldTransfer
	conns  map[net.Conn]struct{}
	stats  ReceiverStats
	closed bool
}

// heldTransfer is a received transfer with the timer that expires it.
type heldTransfer struct {
	r     Received
	timer *time.Timer
}

// Listen starts a receiver on ln (which it closes when it closes).
func Listen(ln net.Listener, cfg ReceiverConfig) (*Receiver, error) {
	if cfg.BlockSize <= 0 || cfg.BlockBytes <= 0 || cfg.BlockBytes > MaxBlockBytes || cfg.Layers <= 0 || cfg.BlockBytes%cfg.Layers != 0 {
		return nil, fmt.Errorf("kvtransfer: receiver of blocks of %d tokens, %d bytes and %d layers", cfg.BlockSize, cfg.BlockBytes, cfg.Layers)
	}
	if cfg.MaxHeldBytes <= 0 {
		cfg.MaxHeldBytes = DefaultMaxHeldBytes
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = DefaultMaxDuration
	}
	r := &Receiver{cfg: cfg, log: cfg.Logger, ln: ln, held: make(map[string]*heldTransfer), conns: make(map[net.Conn]struct{})}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Addr is the address the receiver listens on.
func (r *Receiver) Addr() net.Addr { return r.ln.Addr() }

// Take removes and returns the transfer id, when it arrived intact and has not expired.
func (r *Receiver) Take(id string) (Received, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.held[id]
	if h == nil {
		return Received{}, false
	}
	h.timer.Stop()
	r.drop(id, h)
	r.stats.Taken++
	return h.r, true
}

// Stats returns the receiver's counters.
func (r *Receiver) Stats() ReceiverStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close stops accepting, cuts the transfers in progress, waits for their goroutines, and
// drops what is held.
func (r *Receiver) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	for id, h := range r.held {
		h.timer.Stop()
		r.drop(id, h)
	}
	r.mu.Unlock()
	err := r.ln.Close()
	r.wg.Wait()
	return err
}

// drop forgets a held transfer (caller holds r.mu).
func (r *Receiver) drop(id string, h *heldTransfer) {
	delete(r.held, id)
	r.stats.HeldBytes -= int64(len(h.r.Data))
}

// accept serves connections until the listener closes.
func (r *Receiver) accept() {
	defer r.wg.Done()
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			conn.Close()
			return
		}
		r.conns[conn] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			r.serve(conn)
			r.mu.Lock()
			delete(r.conns, conn)
			r.mu.Unlock()
			conn.Close()
		}()
	}
}

// serve receives one transfer on conn and acknowledges it.
func (r *Receiver) serve(conn net.Conn) {
	id, size, err := r.receive(conn)
	if r.cfg.OnDone != nil {
		r.cfg.OnDone(err, size)
	}
	ack := Ack{OK: err == nil}
	if err != nil {
		ack.Error = err.Error()
		r.mu.Lock()
		r.stats.Failed++
		r.mu.Unlock()
		r.log.Warn("kv transfer failed: the decode request will compute its prompt", "transfer_id", id, "from", conn.RemoteAddr(), "err", err)
	}
	conn.SetWriteDeadline(time.Now().Add(r.cfg.Timeout))
	if werr := writeJSONFrame(conn, FrameAck, ack); werr != nil && err == nil {
		// The sender may not learn of its success: it releases its blocks either way,
		// and the blocks held here serve the request all the same.
		r.log.Warn("kv transfer: acknowledgement not delivered", "transfer_id", id, "err", werr)
	}
}

// receive reads one transfer from conn into the held set, returning its id and size.
func (r *Receiver) receive(conn net.Conn) (string, int64, error) {
	// Every read from the connection renews its deadline (keepalive frames are progress),
	// within the transfer's whole bound.
	end := time.Now().Add(r.cfg.MaxDuration)
	br := bufio.NewReaderSize(deadlineReader{conn: conn, timeout: r.cfg.Timeout, end: end}, 64<<10)
	h, err := ReadHeader(br)
	if err != nil {
		return "", 0, err
	}
	switch {
	case r.cfg.Model != "" && h.Model != r.cfg.Model:
		return h.ID, 0, fmt.Errorf("model %q, this instance serves %q", h.Model, r.cfg.Model)
	case h.BlockSize != r.cfg.BlockSize || h.BlockBytes != r.cfg.BlockBytes || h.NumLayers != r.cfg.Layers:
		return h.ID, 0, fmt.Errorf("blocks of %d tokens, %d bytes and %d layers, this instance's are %d, %d and %d",
			h.BlockSize, h.BlockBytes, h.NumLayers, r.cfg.BlockSize, r.cfg.BlockBytes, r.cfg.Layers)
	case h.KVCacheDType != r.cfg.KVCacheDType:
		return h.ID, 0, fmt.Errorf("a kv cache of %s elements, this instance's holds %s (give both the same --kv-cache-dtype)", orUnnamed(h.KVCacheDType), orUnnamed(r.cfg.KVCacheDType))
	case h.KVLayout != r.cfg.KVLayout:
		return h.ID, 0, fmt.Errorf("blocks laid out for a model split %s, this instance's are for %s (split both by tensor, and then by pipeline, the same way)", layoutName(h.KVLayout), layoutName(r.cfg.KVLayout))
	}
	size := int64(h.NumBlocks) * int64(h.BlockBytes)
	if err := r.reserve(h.ID, size); err != nil {
		return h.ID, size, err
	}
	ok := false
	defer func() {
		if !ok {
			r.unreserve(size)
		}
	}()
	// The frames come in the order the sender's prefill computes them (within a chunk of
	// blocks, layer after layer); each block is assembled from its layers.
	a := newAssembly(h)
	buf := make([]byte, h.LayerBytes())
	for {
		p, end, err := ReadPart(br, h, buf)
		if err != nil {
			return h.ID, size, err
		}
		if end {
			break
		}
		if err := a.add(p); err != nil {
			return h.ID, size, err
		}
	}
	got, err := a.done()
	if err != nil {
		return h.ID, size, err
	}
	if err := r.hold(h.ID, got); err != nil {
		return h.ID, size, err
	}
	ok = true
	return h.ID, size, nil
}

// reserve counts size bytes against MaxHeldBytes for a transfer about to be read.
func (r *Receiver) reserve(id string, size int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held[id] != nil {
		return fmt.Errorf("transfer %q is held already", id)
	}
	if r.stats.HeldBytes+size > r.cfg.MaxHeldBytes {
		return fmt.Errorf("%d bytes would pass the %d bytes this instance holds for transfers (%d held)", size, r.cfg.MaxHeldBytes, r.stats.HeldBytes)
	}
	r.stats.HeldBytes += size
	return nil
}

// unreserve gives back a failed transfer's reservation.
func (r *Receiver) unreserve(size int64) {
	r.mu.Lock()
	r.stats.HeldBytes -= size
	r.mu.Unlock()
}

// hold keeps a complete transfer until Take or its TTL (its bytes are reserved already).
func (r *Receiver) hold(id string, got Received) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("receiver closed")
	}
	if r.held[id] != nil {
		return fmt.Errorf("transfer %q is held already", id)
	}
	h := &heldTransfer{r: got}
	h.timer = time.AfterFunc(r.cfg.TTL, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.held[id] == h {
			r.drop(id, h)
			r.stats.Expired++
		}
	})
	r.held[id] = h
	r.stats.Received++
	r.stats.Bytes += int64(len(got.Data))
	return nil
}

// deadlineReader reads from a connection with a deadline renewed before every read: timeout
// from now, but never past end.
type deadlineReader struct {
	conn    net.Conn
	timeout time.Duration
	end     time.Time
}

func (d deadlineReader) Read(p []byte) (int, error) {
	t := time.Now().Add(d.timeout)
	if t.After(d.end) {
		t = d.end
	}
	d.conn.SetReadDeadline(t)
	return d.conn.Read(p)
}

// orUnnamed returns a KV cache element type's name for a message ("unnamed" for none: a
// sender of an older version).
func orUnnamed(dt string) string {
	if dt == "" {
		return "unnamed"
	}
	return dt
}

// layoutName is a block layout's name in a message (Header.KVLayout).
func layoutName(l string) string {
	if l == "" {
		return "not by tensor"
	}
	return l
}
