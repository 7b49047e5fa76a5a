package kvtransfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvasir-llm/kvasir/internal/kvcache"
)

// DefaultTimeout bounds each step of a transfer on both sides: the dial, each frame's
// write or read, the wait for the acknowledgement.
const DefaultTimeout = 10 * time.Second

// Source yields the parts a sender streams: every layer of every block, once each, in the
// order they are computed.
type Source interface {
	// Next copies the next part's bytes (Header.LayerBytes of them) into dst and says
	// which block and layer they are, or returns io.EOF once it gave them all. It may wait
	// for the part to be computed (the sender keeps the connection alive meanwhile), and
	// must return soon after ctx ends.
	Next(ctx context.Context, dst []byte) (block, layer int, err error)
}

// Sender streams transfers to receivers.
type Sender struct {
	// Timeout bounds the dial, each frame's write and the wait for the acknowledgement
	// (0: DefaultTimeout).
	Timeout time.Duration
	// Dial opens the connection (nil: a net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Send streams the h.NumLayers layers of each of h.NumBlocks blocks from src, with the
// blocks' chained hashes, to the receiver at addr, and returns once the receiver acknowledged them: nil when it holds them all, else
// the reason (the receiver's own refusal, a broken or stalled connection, ctx's end). The
// caller may release the blocks once Send returns, whatever it returns.
func (s *Sender) Send(ctx context.Context, addr string, h Header, hashes []kvcache.BlockHash, src Source) error {
	if len(hashes) != h.NumBlocks {
		return fmt.Errorf("kvtransfer: %d hashes for %d blocks", len(hashes), h.NumBlocks)
	}
	if err := h.check(); err != nil {
		return fmt.Errorf("kvtransfer: header: %w", err)
	}
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	dial := s.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	conn, err := dial(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return fmt.Errorf("kvtransfer: dial %s: %w", addr, err)
	}
	defer conn.Close()
	// ctx's end cuts the connection, which fails the read or write in progress.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	err = s.stream(ctx, conn, timeout, h, hashes, src)
	if ctx.Err() != nil {
		return fmt.Errorf("kvtransfer: to %s: %w", addr, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("kvtransfer: to %s: %w", addr, err)
	}
	return nil
}

// stream writes the transfer on conn and reads the acknowledgement, which a receiver may
// send before the end, refusing the transfer: it is read all along, so that the refusal's
// reason is what Send reports rather than the broken pipe that follows it.
func (s *Sender) stream(ctx context.Context, conn net.Conn, timeout time.Duration, h Header, hashes []kvcache.BlockHash, src Source) error {
	type answer struct {
		ack Ack
		err error
	}
	acks := make(chan answer, 1) // the reader ends when Send closes conn, at the latest
	go func() {
		var a answer
		a.err = readJSONFrame(bufio.NewReader(conn), FrameAck, &a.ack)
		acks <- a
	}()
	if err := write(ctx, conn, timeout, h, hashes, src); err != nil {
		if _, ok := errors.AsType[*sourceError](err); ok {
			return err // this side's failure: closing the connection tells the receiver
		}
		select {
		case a := <-acks:
			if a.err == nil && !a.ack.OK {
				return fmt.Errorf("%w: %s", ErrRefused, a.ack.Error)
			}
		case <-time.After(min(timeout, time.Second)):
		}
		return err
	}
	conn.SetReadDeadline(time.Now().Add(timeout))
	a := <-acks
	if a.err != nil {
		return fmt.Errorf("acknowledgement: %w", a.err)
	}
	if !a.ack.OK {
		return fmt.Errorf("%w: %s", ErrRefused, a.ack.Error)
	}
	return nil
}

// write writes the transfer's frames on conn, each layer of a block once src has it.
func write(ctx context.Context, conn net.Conn, timeout time.Duration, h Header, hashes []kvcache.BlockHash, src Source) error {
	w := bufio.NewWriterSize(conn, 64<<10)
	// deadline renews the write deadline before each frame: a stalled receiver fails the
	// frame it stalls, not the whole transfer's budget.
	deadline := func() { conn.SetWriteDeadline(time.Now().Add(timeout)) }
	deadline()
	if _, err := w.WriteString(Magic); err != nil {
		return err
	}
	if err := writeJSONFrame(w, FrameHeader, h); err != nil {
		return err
	}
	buf := make([]byte, h.LayerBytes())
	for n := range h.NumBlocks * h.NumLayers {
		block, layer, err := next(ctx, conn, w, timeout, src, buf)
		switch {
		case errors.Is(err, io.EOF):
			return &sourceError{fmt.Errorf("the source ended after %d of %d layers of %d blocks", n, h.NumLayers, h.NumBlocks)}
		case err != nil:
			return err
		case block < 0 || block >= h.NumBlocks || layer < 0 || layer >= h.NumLayers:
			return &sourceError{fmt.Errorf("the source gave layer %d of block %d of %d blocks of %d layers", layer, block, h.NumBlocks, h.NumLayers)}
		}
		deadline()
		if err := writeLayer(w, block, layer, hashes[block], buf); err != nil {
			return err
		}
	}
	deadline()
	if err := writeFrame(w, FrameEnd); err != nil {
		return err
	}
	return w.Flush()
}

// next reads the next part from src into buf. While the source waits for it, what is
// buffered goes out (the receiver gets each layer as soon as the next one is not at
// hand), and a keepalive frame every half timeout, so that the receiver's read deadline
// measures a stalled connection, not a prefill still computing the layer.
func next(ctx context.Context, conn net.Conn, w *bufio.Writer, timeout time.Duration, src Source, buf []byte) (int, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type part struct {
		block, layer int
		err          error
	}
	done := make(chan part, 1)
	go func() {
		var p part
		p.block, p.layer, p.err = src.Next(ctx, buf)
		done <- p
	}()
	got := func(p part) (int, int, error) {
		if p.err != nil && !errors.Is(p.err, io.EOF) {
			return 0, 0, &sourceError{fmt.Errorf("read layer: %w", p.err)}
		}
		return p.block, p.layer, p.err
	}
	select {
	case p := <-done:
		return got(p)
	default:
	}
	if w.Buffered() > 0 {
		if err := w.Flush(); err != nil {
			cancel()
			<-done
			return 0, 0, err
		}
	}
	tick := time.NewTicker(timeout / 2)
	defer tick.Stop()
	for {
		select {
		case p := <-done:
			return got(p)
		case <-tick.C:
			conn.SetWriteDeadline(time.Now().Add(timeout))
			err := writeFrame(w, FrameKeepalive)
			if err == nil {
				err = w.Flush()
			}
			if err != nil {
				cancel()
				<-done
				return 0, 0, err
			}
		}
	}
}

// sourceError is a transfer's failure on the sender's side: its source's.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

// ErrRefused is a transfer the receiver answered with a negative acknowledgement.
var ErrRefused = errors.New("refused by the receiver")
