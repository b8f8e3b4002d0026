# cmake -DINPUT=<file> -DOUTPUT=<file.c> -DNAME=<symbol> -P cmake/embed.cmake
# Writes a C array `const unsigned char NAME[]` (8-byte aligned, as fatbin headers need, and followed
# by a NUL so PTX text is a string) and `const unsigned long NAME_size` (without the NUL).
file(READ ${INPUT} hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE ${OUTPUT} "/* Generated from ${INPUT} by embed.cmake. */\n"
     "const unsigned char ${NAME}[] __attribute__((aligned(8))) = {\n${bytes}0x00};\n"
     "const unsigned long ${NAME}_size = ${size};\n")
