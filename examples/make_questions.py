"""Write the sample question bank of hybrid-qpr: examples/questions.jsonl and examples/beir/.

Every question below was written by hand for this project (no external text). The bank looks
like a small FAQ / community-QA site: 75 paraphrase *groups* of 4 questions each (300 in all).
Each group is a different question; its four phrasings vary the way real duplicate questions
do - some share most of their words, some share almost none - so neither BM25 nor the encoder
finds every paraphrase alone. Groups may be about related things (two about learning to code,
several about money), but no group is another group's sentence with one word swapped.

Each question carries metadata ``group`` (its paraphrase group) and ``topic`` (one of 8, for
``--filter topic=...``). Ids are ``<group>-<n>`` (n = 0..3), stable across runs.

Groups are split 60/20/20 into train/val/test by a seeded shuffle; examples/beir holds the BEIR
eval set (corpus = every question; queries = the val and test questions; qrels = the other
questions of the query's group).

Run from the repository root:  python examples/make_questions.py
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

# (topic, group, four phrasings of the same question)
GROUPS = [
    # --- account -------------------------------------------------------------------
    ("account", "netflix-password", [
        "how do i reset my netflix password?",
        "i forgot my netflix password, what do i do?",
        "can't log into netflix because i don't remember the password",
        "netflix password recovery steps?"]),
    ("account", "delete-facebook", [
        "how can i permanently delete my facebook account?",
        "what's the way to remove my facebook profile for good?",
        "i want to quit facebook completely and have all my data erased",
        "steps to get rid of a facebook account forever"]),
    ("account", "gmail-hacked", [
        "i think my gmail account was hacked, what should i do?",
        "someone else is logged into my google account, how do i kick them out?",
        "strange emails are being sent from my gmail that i didn't write",
        "how to secure a compromised gmail account"]),
    ("account", "two-factor", [
        "what is two-factor authentication and should i turn it on?",
        "is 2fa worth enabling on my accounts?",
        "why do websites keep asking me to set up a second login step with my phone?",
        "does two-step verification actually make an account safer?"]),
    ("account", "instagram-username", [
        "how do i change my instagram username?",
        "can i rename my instagram handle without losing followers?",
        "is it possible to pick a new name on instagram and keep my account?",
        "changing instagram user name"]),
    ("account", "password-manager", [
        "which password manager should i use?",
        "are password managers like bitwarden or 1password safe?",
        "what's a good app for storing all my passwords securely?",
        "is it a bad idea to keep every password in one vault app?"]),
    ("account", "cancel-spotify", [
        "how do i cancel my spotify premium subscription?",
        "stop spotify from charging me every month",
        "where is the option to end a spotify premium plan?",
        "i want to downgrade spotify to the free version, how?"]),
    ("account", "amazon-email", [
        "how do i update the email address on my amazon account?",
        "can i switch the email i use to sign in to amazon?",
        "amazon login email change",
        "i no longer use my old email, how do i put a new one on my amazon account?"]),
    ("account", "phishing", [
        "how can i tell if an email is a phishing scam?",
        "what are the signs that a message asking for my password is fake?",
        "i got an email saying my account will be suspended unless i click a link, is it real?",
        "how to spot fraudulent emails pretending to be from my bank"]),
    ("account", "whatsapp-new-phone", [
        "how do i move my whatsapp chats to a new phone?",
        "will i lose my whatsapp messages if i switch phones?",
        "transferring whatsapp history from an old android to an iphone",
        "what's the best way to keep my whatsapp conversations when upgrading my phone?"]),
    # --- travel --------------------------------------------------------------------
    ("travel", "cheap-flights-lisbon", [
        "how do i find cheap flights to lisbon?",
        "tips for getting a budget flight to lisbon",
        "where can i book an inexpensive plane ticket to lisbon?",
        "flying to lisbon without spending a fortune"]),
    ("travel", "japan-visa", [
        "do i need a visa to visit japan as a tourist?",
        "can i travel to japan without applying for a visa?",
        "what are the entry requirements for japan for a two week holiday?",
        "japan tourist visa needed?"]),
    ("travel", "jet-lag", [
        "how can i get over jet lag quickly?",
        "what's the best way to adjust to a new time zone after a long flight?",
        "tips to avoid feeling exhausted after flying across the world",
        "how do you beat jet lag?"]),
    ("travel", "carry-on-liquids", [
        "how much liquid can i take in my carry-on bag?",
        "what are the rules for bringing shampoo and toiletries through airport security?",
        "is there a limit on liquids in hand luggage?",
        "can i bring a full water bottle through the security check?"]),
    ("travel", "lost-luggage", [
        "what should i do if the airline loses my suitcase?",
        "my checked bag didn't arrive at the airport, what now?",
        "how do i claim compensation for lost luggage?",
        "airline misplaced my baggage, who do i contact?"]),
    ("travel", "travel-insurance", [
        "is travel insurance worth buying?",
        "do i really need travel insurance for a short trip?",
        "what does a travel insurance policy actually cover?",
        "should i pay extra for insurance when booking a holiday?"]),
    ("travel", "passport-renewal", [
        "how long does it take to renew a passport?",
        "my passport expires soon, how early should i apply for a new one?",
        "what is the processing time for a passport renewal?",
        "can i get a replacement passport quickly before a trip next month?"]),
    ("travel", "backpacking-europe-budget", [
        "how much money do i need to backpack around europe for a month?",
        "what's a realistic budget for a month of travelling in europe on the cheap?",
        "cost of a one-month backpacking trip across europe",
        "is 2000 dollars enough to travel europe for four weeks?"]),
    ("travel", "motion-sickness", [
        "how do i stop getting car sick on long drives?",
        "what helps with motion sickness when travelling?",
        "i feel nauseous in the back seat of a car, any remedies?",
        "best ways to prevent travel sickness"]),
    ("travel", "airbnb-or-hotel", [
        "is it better to stay in an airbnb or a hotel?",
        "what are the pros and cons of airbnb compared with hotels?",
        "hotel or holiday rental, which is the better choice for a city trip?",
        "why would someone pick airbnb over a normal hotel?"]),
    # --- cooking -------------------------------------------------------------------
    ("cooking", "egg-substitute", [
        "what can i use instead of eggs when baking a cake?",
        "is there a good egg replacement for baking?",
        "how do vegans bake without eggs?",
        "i'm out of eggs, what can i put in my muffin batter instead?"]),
    ("cooking", "leftover-rice", [
        "how long does cooked rice last in the fridge?",
        "is leftover rice safe to eat after three days?",
        "can reheating old rice make you sick?",
        "how long can i keep cooked rice before throwing it out?"]),
    ("cooking", "sticky-pasta", [
        "how do i keep pasta from sticking together?",
        "why does my spaghetti always clump together?",
        "should i add oil to the water to stop pasta sticking?",
        "tips for cooking pasta so it doesn't turn into one lump"]),
    ("cooking", "sourdough-starter", [
        "how do i make a sourdough starter from scratch?",
        "what do i need to begin my own sourdough culture at home?",
        "step by step guide to growing a starter for sourdough bread",
        "how many days does it take to get a homemade sourdough starter going?"]),
    ("cooking", "sharpen-knife", [
        "what is the best way to sharpen a kitchen knife?",
        "how do i use a whetstone to sharpen knives?",
        "my kitchen knives are dull, how can i get them sharp again?",
        "honing steel vs sharpening stone, which do i need?"]),
    ("cooking", "season-cast-iron", [
        "how do i season a cast iron pan?",
        "what oil should i use to season cast iron?",
        "how to build up a non-stick coating on a cast iron skillet",
        "re-seasoning a cast iron frying pan step by step"]),
    ("cooking", "ripen-avocado", [
        "how can i make avocados ripen faster?",
        "my avocados are rock hard, how do i soften them quickly?",
        "is there a trick to speed up avocado ripening?",
        "putting avocados in a paper bag to ripen, does it work?"]),
    ("cooking", "freeze-bread", [
        "can you freeze bread, and how do you thaw it?",
        "does freezing a loaf of bread ruin it?",
        "how should i defrost frozen bread so it tastes fresh?",
        "keeping bread in the freezer, good idea?"]),
    ("cooking", "onion-tears", [
        "how do i stop crying when chopping onions?",
        "why do onions make your eyes water and how can i prevent it?",
        "any tricks for cutting onions without tears?",
        "my eyes burn every time i slice an onion, help"]),
    ("cooking", "medium-rare-steak", [
        "how do i know when a steak is medium rare?",
        "what internal temperature should a medium-rare steak reach?",
        "how long should i cook a steak on each side for medium rare?",
        "checking if steak is done without cutting it"]),
    # --- health --------------------------------------------------------------------
    ("health", "fall-asleep", [
        "how can i fall asleep faster at night?",
        "i lie awake for hours before i can sleep, what helps?",
        "tips for getting to sleep quickly",
        "what are natural remedies for insomnia?"]),
    ("health", "running-weight-loss", [
        "is running a good way to lose weight?",
        "will jogging every day help me burn fat?",
        "how much running do i need to do to slim down?",
        "can you lose belly fat by going for runs?"]),
    ("health", "daily-water", [
        "how much water should i drink every day?",
        "is the eight glasses of water a day rule true?",
        "what is the right daily amount of water for an adult?",
        "how do i know if i'm drinking enough water?"]),
    ("health", "desk-back-pain", [
        "how can i relieve lower back pain from sitting at a desk all day?",
        "my back hurts after long hours at the computer, what should i do?",
        "exercises for office workers with a sore lower back",
        "what's the best chair posture to avoid back ache at work?"]),
    ("health", "coffee-every-day", [
        "is drinking coffee every day bad for you?",
        "how many cups of coffee a day is too much?",
        "what are the health effects of daily caffeine?",
        "is it unhealthy to have three coffees a day?"]),
    ("health", "cold-or-flu", [
        "what is the difference between a cold and the flu?",
        "how can i tell if i have the flu or just a common cold?",
        "flu vs cold symptoms",
        "is my runny nose and fever a cold or influenza?"]),
    ("health", "quit-smoking", [
        "what is the best way to quit smoking?",
        "how do i give up cigarettes for good?",
        "do nicotine patches really help people stop smoking?",
        "tips for kicking a pack-a-day habit"]),
    ("health", "hiccups", [
        "how do you get rid of hiccups?",
        "what's the fastest way to stop hiccups?",
        "i've had hiccups for an hour, how do i make them go away?",
        "does holding your breath actually cure hiccups?"]),
    ("health", "start-meditating", [
        "how do i start meditating as a complete beginner?",
        "what's an easy way to learn meditation?",
        "any tips for someone who has never meditated before?",
        "how long should a beginner meditate each day?"]),
    ("health", "muscle-at-home", [
        "how can i build muscle without going to the gym?",
        "is it possible to gain muscle with only bodyweight exercises at home?",
        "home workout to get stronger with no equipment",
        "can push-ups and squats alone make me muscular?"]),
    # --- tech ----------------------------------------------------------------------
    ("tech", "slow-macbook", [
        "why is my macbook so slow and how can i speed it up?",
        "my mac has become really laggy, any fixes?",
        "how do i make an old macbook run faster?",
        "what slows down a mac over time?"]),
    ("tech", "learn-python", [
        "what is the best way to learn python programming?",
        "how should a complete beginner start with python?",
        "which free resources teach python from scratch?",
        "i want to learn to code in python, where do i begin?"]),
    ("tech", "first-language", [
        "which programming language should i learn first?",
        "what's the best first language for someone new to coding?",
        "python or javascript for a total beginner?",
        "should beginners start with c or something easier?"]),
    ("tech", "phone-battery", [
        "why does my phone battery drain so fast?",
        "how can i make my smartphone battery last longer?",
        "my iphone battery dies by midday, what can i do?",
        "tips to save battery on an android phone"]),
    ("tech", "slow-wifi", [
        "why is my wifi so slow at home?",
        "how do i improve a weak wireless signal in my house?",
        "my internet keeps dropping in the bedroom, how can i fix it?",
        "does moving the router make wifi faster?"]),
    ("tech", "windows-screenshot", [
        "how do i take a screenshot on windows?",
        "what's the keyboard shortcut for a screen capture on a pc?",
        "how to capture only part of the screen in windows 11",
        "print screen on a windows laptop, how does it work?"]),
    ("tech", "need-a-vpn", [
        "what is a vpn and do i need one?",
        "is it worth paying for a vpn service?",
        "does a vpn actually keep me safe on public wifi?",
        "why do people use vpns?"]),
    ("tech", "backup-photos", [
        "what's the best way to back up all my photos?",
        "how do i make sure i never lose my family pictures?",
        "should i store my photo collection in the cloud or on an external drive?",
        "safest place to keep thousands of digital photos"]),
    ("tech", "student-laptop", [
        "which laptop should i buy for college?",
        "what's a good affordable laptop for a university student?",
        "recommendations for a student laptop under 800 dollars",
        "do i need a powerful computer for university work?"]),
    ("tech", "git-undo-commit", [
        "how do i undo the last commit in git?",
        "i committed the wrong files in git, how do i take it back?",
        "git revert vs reset for removing a recent commit",
        "remove latest git commit but keep my changes"]),
    # --- money ---------------------------------------------------------------------
    ("money", "invest-bitcoin", [
        "is it a good idea to invest in bitcoin?",
        "should i put my savings into cryptocurrency?",
        "is buying bitcoin now a smart move or too risky?",
        "what are the risks of investing in bitcoin?"]),
    ("money", "index-funds", [
        "what is an index fund and how does it work?",
        "can someone explain index funds in simple terms?",
        "why do people recommend index funds for beginners?",
        "how does investing in an s&p 500 fund work?"]),
    ("money", "emergency-fund", [
        "how big should my emergency fund be?",
        "how many months of expenses should i keep in savings for emergencies?",
        "what's a sensible amount of rainy day money?",
        "do i need an emergency fund if i have a credit card?"]),
    ("money", "credit-score", [
        "how can i improve my credit score quickly?",
        "what raises a credit rating the fastest?",
        "my credit score is low, how do i fix it?",
        "tips to boost credit score before applying for a mortgage"]),
    ("money", "house-deposit", [
        "how do i save for a house deposit?",
        "what's the fastest way to put together a down payment for a home?",
        "how much should i set aside each month to buy a house in five years?",
        "tips for saving up to buy my first flat"]),
    ("money", "rent-or-buy", [
        "is it better to rent or buy a home?",
        "does buying a house really make more financial sense than renting?",
        "renting vs owning, which is smarter long term?",
        "is renting forever throwing money away?"]),
    ("money", "monthly-budget", [
        "how do i make a monthly budget and stick to it?",
        "what is the simplest way to start budgeting?",
        "i never know where my money goes each month, how do i track it?",
        "best budgeting method for someone bad with money"]),
    ("money", "debt-or-savings", [
        "should i pay off debt or save first?",
        "is it smarter to clear my credit card debt before putting money aside?",
        "debt repayment vs building savings, which comes first?",
        "i have some savings and some loans, what do i do with extra cash?"]),
    ("money", "retirement-start", [
        "when should i start saving for retirement?",
        "is 25 too early to think about a pension?",
        "how much should i put into retirement at age 30?",
        "does it matter if i start my retirement savings late?"]),
    # --- home ----------------------------------------------------------------------
    ("home", "bathroom-mold", [
        "how do i get rid of mold on bathroom walls?",
        "black mold keeps coming back in my shower, how do i stop it?",
        "what's the best cleaner for mould on the ceiling?",
        "removing mildew from a bathroom for good"]),
    ("home", "yellow-leaves", [
        "why are the leaves on my houseplant turning yellow?",
        "my indoor plant has yellow leaves, what am i doing wrong?",
        "is overwatering the reason my plant leaves go yellow?",
        "yellowing leaves on a potted plant, how to fix"]),
    ("home", "blocked-sink", [
        "how do i unclog a kitchen sink without a plumber?",
        "my sink drain is blocked, what can i pour down it?",
        "does baking soda and vinegar really clear a clogged drain?",
        "water won't go down the sink, how do i fix it myself?"]),
    ("home", "heating-bill", [
        "how can i lower my heating bill in winter?",
        "what are cheap ways to keep a house warm?",
        "my energy bills are huge, how do i cut heating costs?",
        "tips for staying warm at home without turning up the thermostat"]),
    ("home", "paint-walls", [
        "how do i paint a room without leaving streaks?",
        "what's the right way to paint walls so the finish looks even?",
        "do i need to use primer before painting a wall?",
        "beginner tips for painting a bedroom"]),
    ("home", "fruit-flies", [
        "how do i get rid of fruit flies in my kitchen?",
        "there are tiny flies around my fruit bowl, how do i kill them?",
        "homemade trap for fruit flies that works",
        "where do fruit flies come from and how do i stop them?"]),
    ("home", "dog-barking", [
        "how do i stop my dog from barking at every noise?",
        "my dog barks whenever someone walks past the house, what can i do?",
        "training a dog to be quiet on command",
        "why does my puppy bark so much and how do i calm it?"]),
    ("home", "cat-scratching", [
        "how do i stop my cat from scratching the sofa?",
        "my cat is destroying the furniture with its claws, help",
        "what can i spray on furniture to keep cats from scratching?",
        "best way to train a cat to use a scratching post instead of the couch"]),
    # --- work ----------------------------------------------------------------------
    ("work", "interview-weakness", [
        "how should i answer 'what is your greatest weakness' in an interview?",
        "what's a good response when an interviewer asks about my weaknesses?",
        "how do i talk about my flaws in a job interview without hurting my chances?",
        "best answer for the biggest weakness question"]),
    ("work", "ask-for-raise", [
        "how do i ask my boss for a raise?",
        "what's the best way to negotiate a higher salary at my current job?",
        "when is the right time to ask for a pay rise?",
        "i think i'm underpaid, how do i bring it up with my manager?"]),
    ("work", "resume-gap", [
        "how do i explain a gap in my resume?",
        "i was unemployed for a year, how do i handle that on my cv?",
        "will employers reject me because of a long career break?",
        "what to say about time off work in a job interview"]),
    ("work", "public-speaking", [
        "how can i get over my fear of public speaking?",
        "i get really nervous before presentations, how do i calm down?",
        "tips for speaking in front of a large audience without panicking",
        "how do confident speakers deal with stage fright?"]),
    ("work", "procrastination", [
        "how do i stop procrastinating?",
        "why do i keep putting off important tasks until the last minute?",
        "what actually works for beating procrastination?",
        "i waste hours instead of working, how do i get motivated?"]),
    ("work", "resign-politely", [
        "how do i quit my job professionally?",
        "what's the right way to hand in my resignation?",
        "how much notice should i give when leaving a job?",
        "should i tell my boss in person that i'm resigning?"]),
    ("work", "cover-letter", [
        "how do i write a good cover letter?",
        "what should a cover letter for a job application include?",
        "is a cover letter still necessary, and how long should it be?",
        "tips for writing a cover letter that gets noticed"]),
    ("work", "work-from-home-focus", [
        "how do i stay productive when working from home?",
        "i get distracted all the time working remotely, any advice?",
        "tips for focusing at home without an office",
        "how can i keep a routine while working from my apartment?"]),
]


def build() -> list[dict]:
    questions = []
    for topic, group, phrasings in GROUPS:
        for j, text in enumerate(phrasings):
            questions.append({"id": f"{group}-{j}", "text": text, "group": group, "topic": topic})
    return questions


def main() -> None:
    from hybrid_qpr.artifacts import write_jsonl
    from hybrid_qpr.data.beir import write_beir
    from hybrid_qpr.data.clusters import Cluster, Question

    questions = build()
    write_jsonl(HERE / "questions.jsonl", questions)
    groups: dict[str, list[dict]] = {}
    for q in questions:
        groups.setdefault(q["group"], []).append(q)
    names = sorted(groups)
    random.Random(13).shuffle(names)
    cut1, cut2 = int(0.6 * len(names)), int(0.8 * len(names))
    parts = {"train": names[:cut1], "val": names[cut1:cut2], "test": names[cut2:]}
    splits = {split: [Cluster(g, [Question(q["id"], q["text"]) for q in groups[g]]) for g in sorted(part)]
              for split, part in parts.items()}
    counts = write_beir(HERE / "beir", splits)
    print(f"{len(questions)} questions in {len(groups)} groups -> examples/questions.jsonl; beir: {counts}")


if __name__ == "__main__":
    main()
