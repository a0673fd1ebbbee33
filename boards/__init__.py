"""Board platforms and top-levels for bitstream builds."""
