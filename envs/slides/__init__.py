"""gymfleet/Slides-v0: write an HTML deck from a brief; scored on what Chromium visibly renders."""
