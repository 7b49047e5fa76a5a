package main

import (
	"flag"
	"fmt"
	"math"

	"github.com/kvasir-llm/kvasir"
)

// byteSize is a flag value holding a size in bytes, read by kvasir.ParseBytes: a plain
// number of bytes or one with a unit (512KiB, 10MiB, 2GiB, 1GB), as every size flag of
// every command takes it.
type byteSize struct {
	v   *int64
	max int64 // the largest value the destination holds
}

// bytesVar defines a size flag on fs storing into p, with the default def.
func bytesVar(fs *flag.FlagSet, p *int64, name string, def int64, usage string) {
	*p = def
	fs.Var(&byteSize{v: p, max: math.MaxInt64}, name, usage+" (a `size`: bytes, or with a unit such as 512KiB or 10MiB)")
}

// intBytesVar is bytesVar for an int destination.
func intBytesVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	v := new(int64)
	*p, *v = def, int64(def)
	fs.Var(&intBytes{byteSize{v: v, max: math.MaxInt}, p}, name, usage+" (a `size`: bytes, or with a unit such as 1KiB or 16KiB)")
}

// String writes the size with the largest binary unit that divides it.
func (b *byteSize) String() string {
	if b == nil || b.v == nil {
		return "0"
	}
	return formatBytes(*b.v)
}

// Set reads a size.
func (b *byteSize) Set(s string) error {
	n, err := kvasir.ParseBytes(s)
	if err != nil {
		return err
	}
	if n > b.max {
		return fmt.Errorf("%s is too large", s)
	}
	*b.v = n
	return nil
}

// Get returns the size, an int64, for the checks of parseFlags.
func (b *byteSize) Get() any { return *b.v }

// intBytes is a byteSize that also stores into an int.
type intBytes struct {
	byteSize
	p *int
}

// Set reads a size into both destinations.
func (b *intBytes) Set(s string) error {
	if err := b.byteSize.Set(s); err != nil {
		return err
	}
	*b.p = int(*b.v)
	return nil
}

// formatBytes writes n with the largest binary unit that divides it exactly (10MiB, 16KiB,
// 1000): what a user would type.
func formatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprint(n)
}
