cat > Makefile <<'MK'
CC = gcc
CFLAGS = -Wall -O2
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

calc: $(OBJS)
	$(CC) $(CFLAGS) -o calc $(OBJS)

src/%.o: src/%.c src/mathx.h
	$(CC) $(CFLAGS) -c $< -o $@

.PHONY: clean
clean:
	rm -f calc $(OBJS)
MK
make clean && make && ./calc 3 4
