package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// chartSVG draws the report as two grouped bar charts, one above the
// other: server CPU per packet (median, with the min–max range as a
// whisker) and replies per second, with a group per scenario and a bar per
// server variant. Plain SVG 1.1 with no scripts or external fonts, so any
// browser or image viewer shows it.
func chartSVG(rep *report) string {
	var scs, vars []string
	// Only the packet-rate scenarios: storms, RTT and memory have tables
	// of their own. Only variants with a bar somewhere get a colour.
	for _, sc := range rep.Options.Scenarios {
		if sc.packets() {
			scs = append(scs, sc.Name)
		}
	}
	for _, v := range rep.Options.Variants {
		for _, c := range rep.Cells {
			if c.Variant == v.Spec {
				vars = append(vars, v.Spec)
				break
			}
		}
	}
	get := func(sc, v string) *cell {
		for i := range rep.Cells {
			if rep.Cells[i].Scenario == sc && rep.Cells[i].Variant == v {
				return &rep.Cells[i]
			}
		}
		return nil
	}
	const (
		left, right = 70, 20
		barW, gap   = 24, 28
		panelH      = 260
		between     = 70
	)
	groupW := len(vars)*barW + gap
	width := max(left+right+len(scs)*groupW, 760)
	if len(scs) > 0 {
		groupW = max(groupW, (width-left-right)/len(scs))
	}
	// Legend, wrapped to the width; the panels start below it.
	var legend strings.Builder
	x, y := left, 32
	for i, v := range vars {
		w := 24 + 7*len(v)
		if x+w > width-right && x > left {
			x, y = left, y+18
		}
		fmt.Fprintf(&legend, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d" font-size="12">%s</text>`+"\n",
			x, y, color(i, v), x+16, y+11, html.EscapeString(v))
		x += w
	}
	top := y + 32
	height := top + 2*panelH + between + 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">udpgate vs baselines (%s mode, %d rep(s), %v windows)</text>`+"\n",
		left, html.EscapeString(rep.Options.Mode), rep.Options.Reps, rep.Options.Window)
	b.WriteString(legend.String())
	panel := func(y0 int, title string, val func(*cell) (v, lo, hi float64), unit string) {
		maxV := 0.0
		for _, sc := range scs {
			for _, v := range vars {
				if c := get(sc, v); c != nil {
					_, _, hi := val(c)
					maxV = max(maxV, hi)
				}
			}
		}
		step := niceStep(maxV / 5)
		axisTop := step * math.Ceil(maxV*1.1/step)
		if axisTop <= 0 {
			axisTop = 1
		}
		yOf := func(v float64) float64 { return float64(y0+panelH) - v/axisTop*panelH }
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", left, y0-10, html.EscapeString(title))
		for t := 0.0; t <= axisTop+step/2; t += step {
			y := yOf(t)
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#dddddd"/>`, left, width-right, y, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>`+"\n", left-6, y+4, axisLabel(t, unit))
		}
		for gi, sc := range scs {
			gx := left + gi*groupW + (groupW-len(vars)*barW)/2
			for vi, v := range vars {
				c := get(sc, v)
				if c == nil {
					continue
				}
				m, lo, hi := val(c)
				bx := gx + vi*barW
				y := yOf(m)
				fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					bx+2, y, barW-4, float64(y0+panelH)-y, color(vi, v), html.EscapeString(sc), html.EscapeString(v), axisLabel(m, unit))
				if hi > lo {
					cx := float64(bx) + barW/2
					fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000000"/>`, cx, cx, yOf(lo), yOf(hi))
					fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000000"/>`+"\n", cx-4, cx+4, yOf(hi), yOf(hi))
				}
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>`+"\n",
					float64(bx)+barW/2, min(y, yOf(hi))-3, shortNum(m))
			}
			fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" text-anchor="middle">%s</text>`+"\n",
				gx+len(vars)*barW/2, y0+panelH+16, html.EscapeString(sc))
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#000000"/>`+"\n", left, width-right, y0+panelH, y0+panelH)
	}
	panel(top+10, "Server CPU per packet, ns (median; whisker: min–max) — lower is better",
		func(c *cell) (float64, float64, float64) { return c.CPUNs, c.CPUMin, c.CPUMax }, "")
	panel(top+10+panelH+between, "Replies per second — higher is better",
		func(c *cell) (float64, float64, float64) { return c.PPS, c.PPS, c.PPS }, "k")
	b.WriteString("</svg>\n")
	return b.String()
}

// color picks a bar colour: fixed ones for the three servers, a palette
// for other variants.
func color(i int, v string) string {
	switch v {
	case kindUdpgate:
		return "#1f77b4"
	case kindRawEcho:
		return "#8c8c8c"
	case kindNaive:
		return "#d62728"
	}
	palette := []string{"#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2", "#8c564b",
		"#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#f7b6d2", "#c49c94", "#dbdb8d"}
	return palette[i%len(palette)]
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func axisLabel(v float64, unit string) string {
	if unit == "k" {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}

func shortNum(v float64) string {
	if v >= 10000 {
		return fmt.Sprintf("%.0fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
