cd repo
git checkout -b feature/greeting main
printf 'hello, world\n' > greeting.txt
git add greeting.txt
git commit -m "Add greeting"
git log --oneline --all
