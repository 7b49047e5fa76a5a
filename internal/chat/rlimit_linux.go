package chat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// limitAddressSpace caps this process's address space at what it maps now plus extra
// bytes, so that a render asking for more fails (fatally: the Go runtime cannot recover
// from a failed map) instead of taking the machine's memory.
func limitAddressSpace(extra int64) error {
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return fmt.Errorf("address-space limit: %w", err)
	}
	field, _, _ := bytes.Cut(statm, []byte(" "))
	pages, err := strconv.ParseInt(string(field), 10, 64)
	if err != nil {
		return fmt.Errorf("address-space limit: /proc/self/statm: %w", err)
	}
	limit := uint64(pages*int64(os.Getpagesize()) + extra)
	if err := unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		return fmt.Errorf("address-space limit of %d bytes: %w", limit, err)
	}
	return nil
}
