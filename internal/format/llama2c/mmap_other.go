//go:build !unix

package llama2c

import (
	"io"
	"os"
)

// mapFile reads the whole of f into memory on systems without mmap support here.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
