package config

import "strings"

// Closest returns the candidate that name most likely misspells, or "" when none is
// close: the one fewest single-character edits away (an insertion, a deletion, a
// substitution or two neighbours swapped), within a bound that grows with the length
// (1 edit up to 4 characters, 2 up to 9, 3 beyond), compared without regard to case and
// separators' kind ("-", "_", "."). Ties go to the first candidate.
func Closest(name string, candidates []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(s))
	}
	n := norm(name)
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(n, norm(c))
		if d > maxEdits(len([]rune(c))) || (bestD >= 0 && d >= bestD) {
			continue
		}
		best, bestD = c, d
	}
	return best
}

func maxEdits(n int) int {
	switch {
	case n <= 4:
		return 1
	case n <= 9:
		return 2
	}
	return 3
}

// editDistance is the optimal string alignment distance of a and b: insertions,
// deletions, substitutions and transpositions of neighbours, each costing one.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	// d[i][j] is the distance of x[:i] and y[:j]; three rows suffice.
	prev2 := make([]int, len(y)+1)
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(y)]
}
