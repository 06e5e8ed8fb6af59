// The bitmap font `kiln plot` writes its text with: 5x7 glyphs (capitals and digits fill rows 0-6,
// lower case has a 5-row x-height and descends into rows 7-8), so text needs no font files.
#pragma once

#include <array>
#include <cstdint>

namespace kiln::trainer::plot {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphRows = 9;     // 7 above the baseline, 2 below
inline constexpr int kGlyphAdvance = 6;  // one blank column between glyphs

// Row bitmaps, top first; bit (kGlyphWidth - 1 - x) is column x.
using Glyph = std::array<uint8_t, kGlyphRows>;

// The glyph of c: ASCII letters, digits, space and . , - _ + % : / ( ) [ ] = # ' ! ? * < >; an
// outlined box for any other character, so a missing glyph shows instead of vanishing.
const Glyph& glyph(char c);

}  // namespace kiln::trainer::plot
