# Four commits on main; the third one broke the price calculation.
set -e
commit() {
  export GIT_AUTHOR_DATE="2026-02-0${1}T09:00:00Z" GIT_COMMITTER_DATE="2026-02-0${1}T09:00:00Z"
  git add -A && git commit -q -m "$2"
}
git init -q -b main repo
cd repo
git config user.name "Grace Hopper"
git config user.email "grace@example.com"
cat > calc.py <<'PY'
TAX_RATE = 0.07


def total(net):
    return net * (1 + TAX_RATE)


if __name__ == "__main__":
    print("%.2f" % total(100))
PY
commit 1 "Add price calculator"
printf 'Prices include tax.\n' > NOTES.md
commit 2 "Add notes"
sed -i 's/return net \* (1 + TAX_RATE)/return net * (1 + TAX_RATE * 10)/' calc.py
commit 3 "Speed up tax computation"
mkdir -p docs
printf '# Usage\n\nRun `python3 calc.py`.\n' > docs/usage.md
commit 4 "Document usage"
