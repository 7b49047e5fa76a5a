//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gguf

import (
	"fmt"
	"io"
	"os"
)

// mapFile reads the whole file into memory on systems where this package does not map
// files.
func mapFile(fd *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fd, data); err != nil {
		return nil, nil, fmt.Errorf("read: %w", err)
	}
	return data, func() error { return nil }, nil
}
