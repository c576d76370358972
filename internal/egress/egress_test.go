package egress

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFair: the water level of max-min fairness, by table.
func TestFair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int64
		demands []int64
		heavy   int
		want    int64
	}{
		{"nobody", 1000, nil, 0, 1000},
		{"heavy only: equal shares", 1000, nil, 4, 250},
		{"light below the share keep theirs, the heavy share the rest", 1000, []int64{100, 50}, 2, 425},
		{"a light one above the share is cut to it", 1000, []int64{10, 600}, 2, 330},
		{"all light, over the budget", 900, []int64{100, 400, 500}, 0, 400},
		{"all light, under the budget: the largest may take the spare", 1000, []int64{100, 200, 300}, 0, 700},
		{"equal light ones over the budget", 1000, []int64{500, 500, 500, 500}, 0, 250},
		{"a zero budget", 0, []int64{5}, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := append([]int64(nil), tc.demands...)
			got := Fair(tc.budget, d, tc.heavy)
			if got != tc.want {
				t.Fatalf("Fair(%d, %v, %d) = %d, want %d", tc.budget, tc.demands, tc.heavy, got, tc.want)
			}
			// Max-min: the shares at the level fill the budget
			// whenever anyone is held, and never pass it.
			var sum int64
			for _, x := range tc.demands {
				sum += min(x, got)
			}
			sum += int64(tc.heavy) * got
			if sum > tc.budget && got > 0 && tc.heavy+len(tc.demands) > 0 && !(tc.heavy == 0 && sumOf(tc.demands) <= tc.budget) {
				t.Fatalf("shares %d over the budget %d", sum, tc.budget)
			}
			if tc.heavy > 0 && tc.budget-sum > int64(tc.heavy+len(tc.demands)) {
				t.Fatalf("shares %d leave %d of the budget %d unused while %d wait", sum, tc.budget-sum, tc.budget, tc.heavy)
			}
		})
	}
}

func sumOf(x []int64) (s int64) {
	for _, v := range x {
		s += v
	}
	return s
}

// TestFairAllocs: a recomputation allocates nothing once its demand slice
// has grown.
func TestFairAllocs(t *testing.T) {
	b := New(1e6)
	now, tx := int64(1e9), uint64(0)
	step := func() {
		for i := range 50 {
			b.Add(int64(100*i), i%3 == 0, 1000)
		}
		now += 5e6
		tx += 5000
		b.Update(now, tx)
	}
	step()
	step()
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("%v allocations per recomputation", a)
	}
}

// TestBudgetSteers: a plant whose heavy connections send exactly their
// ceiling, plus fixed game traffic and per-packet overhead the budget
// does not know of, converges to the budget: the integral controller
// absorbs what the bulk bytes do not show.
func TestBudgetSteers(t *testing.T) {
	const (
		rate   = 10_000_000 // bytes/s
		heavy  = 8
		light  = 200_000 // one light connection's bulk rate
		game   = 1_500_000
		period = int64(5e6)
	)
	b := New(rate)
	now, tx := int64(1e9), uint64(0)
	b.Update(now, tx)
	var total float64
	var n int
	for i := range 400 {
		lvl := float64(b.Level().Load())
		per := float64(period) / 1e9
		bulkHeavy := lvl * per
		lightSent := min(float64(light), lvl) * per
		for range heavy {
			b.Add(int64(bulkHeavy), true, 1<<20)
		}
		b.Add(int64(lightSent), false, 0)
		wire := (float64(heavy)*bulkHeavy+lightSent)*1.03 + game*per // 3 % headers
		tx += uint64(wire)
		now += period
		if !b.Update(now, tx) {
			t.Fatal("no recomputation after a period")
		}
		if i >= 200 {
			total += wire
			n++
		}
	}
	got := total / (float64(n) * float64(period) / 1e9)
	if math.Abs(got-rate)/rate > 0.01 {
		t.Fatalf("egress %.0f B/s, budget %d: off by %.1f %%", got, rate, 100*(got-rate)/rate)
	}
	st := b.Stats()
	if st.Held != heavy || st.HeldBytes != heavy<<20 || st.HeldNs == 0 {
		t.Fatalf("held stats %+v", st)
	}
	// Each heavy one gets (budget − game − light)/heavy, before headers.
	want := (rate/1.03 - game/1.03 - light) / heavy
	if lvl := float64(b.Level().Load()); math.Abs(lvl-want)/want > 0.02 {
		t.Fatalf("level %.0f, want about %.0f", lvl, want)
	}
}

// TestBudgetGameOverBudget: when the game's traffic alone passes the
// budget the bulk keeps 1/MinShare of it; when the bulk is light nothing
// winds up, and the level lets it grow.
func TestBudgetGameOverBudget(t *testing.T) {
	b := New(1_000_000)
	now, tx := int64(1e9), uint64(0)
	b.Update(now, tx)
	for range 100 {
		b.Add(100, true, 0)
		now += 5e6
		tx += 10_000 // 2 MB/s of game traffic
		b.Update(now, tx)
	}
	if got := b.Stats().BulkBudget; got != 1_000_000/MinShare {
		t.Fatalf("bulk budget %d under a game over the budget, want %d", got, 1_000_000/MinShare)
	}
	for range 5 {
		b.Add(500, false, 0) // 100 kB/s, nobody held
		now += 5e6
		tx += 600
		b.Update(now, tx)
	}
	if st := b.Stats(); st.BulkBudget != 1_000_000 || st.Level != 1_000_000 || st.Held != 0 {
		t.Fatalf("light bulk: %+v, want the whole budget as the bulk budget and the level", st)
	}
	// A call within MinPeriod keeps its samples.
	if b.Update(now+MinPeriod-1, tx) {
		t.Fatal("recomputed within MinPeriod")
	}
}

// BenchmarkRecompute: one period's samples of n connections and the
// recomputation, as conn's message timer runs them every 5 ms (a third
// of them held).
func BenchmarkRecompute(b *testing.B) {
	for _, n := range []int{50, 1000, 10000} {
		b.Run(fmt.Sprintf("conns=%d", n), func(b *testing.B) {
			bu := New(1e8)
			now, tx := int64(1e9), uint64(0)
			bu.Update(now, tx)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				for j := range n {
					bu.Add(int64(1000+j*7%5000), j%3 == 0, 1<<16)
				}
				now += 5e6
				tx += 500_000
				bu.Update(now, tx)
			}
		})
	}
}

// TestFairMatchesSorted: on random mixes the passes find the level the
// textbook water-filling over sorted demands finds.
func TestFairMatchesSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		n := rng.IntN(60)
		d := make([]int64, n)
		for j := range d {
			d[j] = rng.Int64N(1 << uint(1+rng.IntN(30)))
		}
		heavy := rng.IntN(5)
		budget := rng.Int64N(1 << 32)
		want := sortedFair(budget, slices.Clone(d), heavy)
		if got := Fair(budget, slices.Clone(d), heavy); got < want-1 || got > want+1 {
			t.Fatalf("case %d: Fair(%d, %v, %d) = %d, want %d", i, budget, d, heavy, got, want)
		}
	}
}

func sortedFair(budget int64, demands []int64, heavy int) int64 {
	slices.Sort(demands)
	left, n := budget, int64(len(demands)+heavy)
	for _, d := range demands {
		if d*n >= left {
			return left / n
		}
		left -= d
		n--
	}
	if heavy > 0 {
		return left / int64(heavy)
	}
	if len(demands) == 0 {
		return budget
	}
	return demands[len(demands)-1] + left
}
