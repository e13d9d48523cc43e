python3 - <<'PY'
import re
src = open("stats.py").read()
start = src.index("def median(data):")
end = src.index("def mode(data):")
fixed = '''def median(data):
    """Median of a non-empty sequence of numbers (the mean of the two middle values when even)."""
    data = sorted(data)
    n = len(data)
    if n == 0:
        raise ValueError("median of empty data")
    mid = n // 2
    if n % 2 == 1:
        return data[mid]
    return (data[mid - 1] + data[mid]) / 2


'''
open("stats.py", "w").write(src[:start] + fixed + src[end:])
PY
python3 -m unittest test_stats
