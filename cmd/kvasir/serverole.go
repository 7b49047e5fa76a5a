package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvasir-llm/kvasir"
	"github.com/kvasir-llm/kvasir/internal/kvtransfer"
	"github.com/kvasir-llm/kvasir/internal/server"
)

// roleFlags are kvasir serve's prefill/decode disaggregation flags.
type roleFlags struct {
	role      *string
	host      *string
	port      *int
	advertise *string
	timeout   *time.Duration
	chunk     *int
	stream    *string
	ttl       *time.Duration
	memory    *int64
}

// addRoleFlags defines the disaggregation flags on fs.
func addRoleFlags(fs *flag.FlagSet) *roleFlags {
	f := &roleFlags{
		role:      fs.String("role", server.RoleBoth, "the instance's role: both (serve requests whole), prefill (compute prompts and send their KV to decode instances) or decode (receive KV and generate); see docs/KV_TRANSFER.md"),
		host:      fs.String("kv-transfer-host", "", "--role decode: address the KV transfer listener binds (default: --host)"),
		port:      fs.Int("kv-transfer-port", 8101, "--role decode: TCP port of the KV transfer listener (0: any free port)"),
		advertise: fs.String("kv-transfer-advertise", "", "--role decode: host:port prefill instances reach the listener at, published on GET /v1/kv_transfer (default: the listener's address, or the pod's own IP given as --kv-transfer-host)"),
		timeout:   fs.Duration("kv-transfer-timeout", kvtransfer.DefaultTimeout, "--role prefill|decode: how long one step of a KV transfer (dial, a block, the acknowledgement) may take; a slower transfer is dropped and the decode instance computes the prompt"),
		chunk:     fs.Int("kv-transfer-chunk", server.DefaultPrefillChunk, "--role prefill: prompt tokens computed before their blocks are sent, while the next ones compute (rounded down to whole blocks)"),
		stream:    fs.String("kv-transfer-stream", "layers", "--role prefill: layers (send each layer's keys and values of a chunk's blocks as soon as the layer is computed; a model split by tensor or pipeline sends chunks) or chunks (send a chunk's blocks once the chunk is computed)"),
		ttl:       fs.Duration("kv-transfer-ttl", kvtransfer.DefaultTTL, "--role decode: how long received KV waits for the request that takes it"),
		memory:    new(int64),
	}
	bytesVar(fs, f.memory, "kv-transfer-memory", kvtransfer.DefaultMaxHeldBytes, "--role decode: host memory for received KV waiting for its requests (beyond it transfers are refused and their prompts computed)")
	return f
}

// check validates the role before the model loads.
func (f *roleFlags) check() error {
	if !slices.Contains(server.Roles, *f.role) {
		return fmt.Errorf("--role %q: want one of %s", *f.role, strings.Join(server.Roles, ", "))
	}
	if *f.stream != "layers" && *f.stream != "chunks" {
		return fmt.Errorf("--kv-transfer-stream %q: want layers or chunks", *f.stream)
	}
	return nil
}

// apply sets up the role on an engine that has loaded: a decode instance starts its KV
// transfer listener (closed by the returned func). hostFlag is serve's --host.
func (f *roleFlags) apply(cfg *server.Config, eng *kvasir.Engine, hostFlag string, log *slog.Logger, metrics *server.Metrics) (func(), error) {
	cfg.Role = *f.role
	if *f.role == server.RoleBoth {
		return func() {}, nil
	}
	if !eng.CacheConfig().PrefixCaching {
		return nil, fmt.Errorf("--role %s: KV transfer goes through the prefix cache: drop --no-prefix-caching", *f.role)
	}
	if eng.BlockBytes() <= 0 {
		return nil, fmt.Errorf("--role %s: this model's KV cache cannot move blocks", *f.role)
	}
	if *f.role == server.RolePrefill {
		cfg.KVSender, cfg.KVPrefillChunk, cfg.KVStreamChunks = &kvtransfer.Sender{Timeout: *f.timeout}, *f.chunk, *f.stream == "chunks"
		if !cfg.KVStreamChunks && !eng.StreamsLayers() {
			log.Info("kv transfer: this model's backend does not report KV layer by layer: blocks go out chunk by chunk")
		}
		return func() {}, nil
	}
	if err := metrics.EnableTransfer(); err != nil {
		return nil, err
	}
	host := *f.host
	if host == "" {
		host = hostFlag
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(*f.port)))
	if err != nil {
		return nil, fmt.Errorf("--kv-transfer-port: %w", err)
	}
	rc, err := kvtransfer.Listen(ln, kvtransfer.ReceiverConfig{Model: eng.ModelName(), BlockSize: eng.BlockSize(), BlockBytes: eng.BlockBytes(), Layers: eng.BlockLayers(), KVCacheDType: eng.KVCacheDType(),
		KVLayout: eng.KVLayout(), MaxHeldBytes: *f.memory, TTL: *f.ttl, Timeout: *f.timeout, Logger: log, OnDone: metrics.ObserveReceived})
	if err != nil {
		ln.Close()
		return nil, err
	}
	addr := *f.advertise
	if addr == "" {
		addr = ln.Addr().String()
		if h, _, _ := net.SplitHostPort(addr); net.ParseIP(h).IsUnspecified() {
			rc.Close()
			return nil, errors.New("--kv-transfer-advertise: the listener binds every interface: say which address prefill instances reach it at (host:port)")
		}
	}
	cfg.KVReceiver, cfg.KVTransferAddress = rc, addr
	log.Info("kv transfer: receiving", "listen", ln.Addr(), "advertise", addr)
	return func() { rc.Close() }, nil
}
