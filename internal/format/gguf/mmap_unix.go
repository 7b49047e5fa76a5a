//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps size bytes of fd read-only and returns the bytes and a function that unmaps
// them. An empty file is not mapped.
func mapFile(fd *os.File, size int) ([]byte, func() error, error) {
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
