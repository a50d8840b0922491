"""What a gate reads of a question, a draft or its tokens: features of the question and its
words, the verbalized-confidence parser and the token-uncertainty signals."""
