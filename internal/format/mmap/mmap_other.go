//go:build !unix

package mmap

import (
	"io"
	"os"
)

// File reads the first size bytes of f into memory, on systems where this package does
// not map files.
func File(f *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
