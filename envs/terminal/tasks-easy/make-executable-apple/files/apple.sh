echo apple
