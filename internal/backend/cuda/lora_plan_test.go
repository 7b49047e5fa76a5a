package cuda

import (
	"math/rand/v2"
	"testing"
)

// TestLoRAPlan: the tiles cover every token of a slot exactly once, slot by slot, each
// tile of one slot and at most LoRATile tokens; tokens of no slot are left out; the unused
// tiles are zero and the table never needs more than LoRATiles entries.
func TestLoRAPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		tokens, nSlots := 1+r.IntN(70), 1+r.IntN(5)
		slots := make([]int32, tokens)
		for i := range slots {
			slots[i] = int32(r.IntN(nSlots+1)) - 1
		}
		order, tiles := make([]int32, tokens), make([]int32, LoRATiles(tokens, nSlots))
		for i := range order {
			order[i] = -7 // the plan must write every entry
		}
		LoRAPlan(slots, nSlots, order, tiles)
		seen := make([]int, tokens)
		prevSlot, used := int32(-1), true
		for i, tile := range tiles {
			cnt, start := tile&15, tile>>4
			if cnt == 0 {
				if tile != 0 {
					t.Fatalf("trial %d: tile %d = %#x: a count of 0 with a start", trial, i, tile)
				}
				used = false
				continue
			}
			if !used {
				t.Fatalf("trial %d: tile %d used after an unused one", trial, i)
			}
			if cnt > LoRATile || int(start+cnt) > tokens {
				t.Fatalf("trial %d: tile %d: %d tokens from %d of %d", trial, i, cnt, start, tokens)
			}
			s := slots[order[start]]
			if s < prevSlot {
				t.Fatalf("trial %d: tile %d of slot %d after slot %d", trial, i, s, prevSlot)
			}
			prevSlot = s
			for k := start; k < start+cnt; k++ {
				tok := order[k]
				if slots[tok] != s {
					t.Fatalf("trial %d: tile %d mixes slots %d and %d", trial, i, s, slots[tok])
				}
				seen[tok]++
			}
		}
		for tok, n := range seen {
			want := 1
			if slots[tok] < 0 {
				want = 0
			}
			if n != want {
				t.Fatalf("trial %d: token %d (slot %d) in %d tiles, want %d", trial, tok, slots[tok], n, want)
			}
		}
		for i, o := range order {
			if o < 0 {
				t.Fatalf("trial %d: order[%d] = %d left unwritten", trial, i, o)
			}
		}
	}
}
