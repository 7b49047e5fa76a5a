package cpu

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"
)

// TestWeightArenaCopy checks that the arena's copies (on a pool and on the caller's thread)
// hold the bytes given, start on 64-byte
// boundaries, do not overlap one another or alias the source, and that a copy larger than
// a chunk starts a huge page.
func TestWeightArenaCopy(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	p := testPool(2)
	defer p.Close()
	var a WeightArena
	sizes := []int{1, 63, 64, 65, 4096, 3 << 20, arenaChunk - 100, arenaChunk + 1, 0, 17}
	var srcs, dsts [][]byte
	for _, n := range sizes {
		src := make([]byte, n)
		r.Read(src)
		pool := p
		if n%2 == 1 {
			pool = nil
		}
		dst, copied := a.Copy(pool, src)
		if !copied {
			t.Skipf("the system has too little memory available for a copy of %d bytes", n)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("copy of %d bytes differs from its source", n)
		}
		if n == 0 {
			continue
		}
		addr := uintptr(unsafe.Pointer(&dst[0]))
		if addr%64 != 0 {
			t.Errorf("copy of %d bytes at %#x: not 64-byte aligned", n, addr)
		}
		if n > arenaChunk && addr%hugePage != 0 {
			t.Errorf("copy of %d bytes (over a chunk) at %#x: not on a huge page", n, addr)
		}
		if &dst[0] == &src[0] || cap(dst) != n {
			t.Errorf("copy of %d bytes aliases its source or can grow into the arena (cap %d)", n, cap(dst))
		}
		srcs, dsts = append(srcs, src), append(dsts, dst)
	}
	// Overwrite every copy: a copy overlapping another would change it.
	for _, d := range dsts {
		for i := range d {
			d[i] ^= 0xff
		}
	}
	for i, d := range dsts {
		for j := range d {
			if d[j] != srcs[i][j]^0xff {
				t.Fatalf("copy %d (%d bytes) overlaps another at byte %d", i, len(d), j)
			}
		}
	}
}

// TestHugeChunkAligned checks hugeChunk's alignment and size for sizes around a huge page.
func TestHugeChunkAligned(t *testing.T) {
	for _, n := range []int{1, hugePage - 1, hugePage, hugePage + 1} {
		b := hugeChunk(n)
		if addr := uintptr(unsafe.Pointer(&b[0])); addr%hugePage != 0 {
			t.Errorf("hugeChunk(%d) at %#x: not on a huge page", n, addr)
		}
		if len(b) < n || len(b)%hugePage != 0 {
			t.Errorf("hugeChunk(%d) has %d bytes, want a whole number of huge pages >= %d", n, len(b), n)
		}
	}
}

// TestMemAvailable checks that the available memory reads as a positive size where the
// system reports it.
func TestMemAvailable(t *testing.T) {
	n, ok := memAvailable()
	if !ok {
		t.Skip("the system does not report its available memory")
	}
	if n <= 0 {
		t.Errorf("memAvailable() = %d", n)
	}
	t.Logf("%d MiB available", n>>20)
}

// TestParseMemAvailable checks the parse of /proc/meminfo's MemAvailable line.
func TestParseMemAvailable(t *testing.T) {
	for _, c := range []struct {
		info string
		want int64
		ok   bool
	}{
		{"MemTotal:       24576000 kB\nMemFree:  1 kB\nMemAvailable:   22000000 kB\n", 22000000 << 10, true},
		{"MemAvailable: 0 kB", 0, true},
		{"MemTotal: 5 kB\n", 0, false},
		{"MemAvailable: 12 MB\n", 0, false},
		{"MemAvailable: -3 kB\n", 0, false},
		{"MemAvailable: x kB\n", 0, false},
		{"", 0, false},
	} {
		got, ok := parseMemAvailable([]byte(c.info))
		if got != c.want || ok != c.ok {
			t.Errorf("parseMemAvailable(%q) = %d, %v, want %d, %v", c.info, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseMemAvailable: any text parses without a panic, and a value it accepts reads
// back from the line it writes.
func FuzzParseMemAvailable(f *testing.F) {
	f.Add([]byte("MemAvailable:   22000000 kB\n"))
	f.Add([]byte("MemTotal: 1 kB\nMemAvailable: 7 kB"))
	f.Fuzz(func(t *testing.T, info []byte) {
		n, ok := parseMemAvailable(info)
		if !ok {
			return
		}
		if n < 0 || n%1024 != 0 {
			t.Fatalf("parseMemAvailable(%q) = %d", info, n)
		}
		again, ok := parseMemAvailable([]byte(fmt.Sprintf("MemAvailable: %d kB\n", n>>10)))
		if !ok || again != n {
			t.Fatalf("%d bytes do not read back: %d, %v", n, again, ok)
		}
	})
}
