//go:build unix

package mmap

import (
	"fmt"
	"os"
	"syscall"
)

// File maps the first size bytes of f read-only and returns them with a function that
// releases the mapping. An empty file maps to an empty slice.
func File(f *os.File, size int64) ([]byte, func() error, error) {
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if size < 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes cannot be mapped", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap: %w", err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
