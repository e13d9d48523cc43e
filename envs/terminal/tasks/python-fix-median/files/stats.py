"""Small statistics helpers."""


def mean(data):
    """Arithmetic mean of a non-empty sequence of numbers."""
    data = list(data)
    if not data:
        raise ValueError("mean of empty data")
    return sum(data) / len(data)


def median(data):
    """Median of a non-empty sequence of numbers (the mean of the two middle values when even)."""
    data = list(data)
    n = len(data)
    mid = n // 2
    if n % 2 == 1:
        return data[mid]
    return data[mid] + data[mid - 1] / 2


def mode(data):
    """The most common value (the smallest one on ties)."""
    data = list(data)
    if not data:
        raise ValueError("mode of empty data")
    counts = {}
    for x in data:
        counts[x] = counts.get(x, 0) + 1
    best = max(counts.values())
    return min(x for x, c in counts.items() if c == best)
